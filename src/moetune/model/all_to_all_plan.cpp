#include "moetune/model/all_to_all_plan.h"

#include "moetune/core/error.h"

namespace moetune::model {

AllToAllPlan plan_all_to_all(const std::vector<int64_t>& counts, const std::vector<int64_t>& arriving, int64_t ranks) {
  const size_t local = counts.size() / size_t(ranks);
  MOETUNE_CHECK(counts.size() == local * size_t(ranks) && arriving.size() == counts.size(),
                "all-to-all plan: {} counts and {} arriving over {} ranks", counts.size(), arriving.size(), ranks);
  AllToAllPlan plan;
  plan.send_rows.assign(size_t(ranks), 0);
  plan.recv_rows.assign(size_t(ranks), 0);
  for (size_t r = 0; r < size_t(ranks); ++r)
    for (size_t e = 0; e < local; ++e) {
      plan.send_rows[r] += counts[r * local + e];
      plan.recv_rows[r] += arriving[r * local + e];
    }
  // Where each (source, expert) block starts in the received rows.
  std::vector<int64_t> block_start(arriving.size(), 0);
  int64_t at = 0;
  for (size_t i = 0; i < arriving.size(); ++i) {
    block_start[i] = at;
    at += arriving[i];
  }
  plan.offsets.assign(local + 1, 0);
  plan.expert_major.reserve(size_t(at));
  for (size_t e = 0; e < local; ++e) {
    for (size_t s = 0; s < size_t(ranks); ++s)
      for (int64_t row = 0; row < arriving[s * local + e]; ++row) plan.expert_major.push_back(block_start[s * local + e] + row);
    plan.offsets[e + 1] = int64_t(plan.expert_major.size());
  }
  return plan;
}

}  // namespace moetune::model
