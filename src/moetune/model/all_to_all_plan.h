// The bookkeeping of expert parallelism's token exchange, shared by the CPU and GPU dispatchers: from how many
// rows each rank sends each expert, the rows each rank sends and receives, and the regrouping of what arrives
// (source-major: each source's rows expert-major) into expert-major order for the grouped GEMMs.
#pragma once

#include <cstdint>
#include <vector>

namespace moetune::model {

struct AllToAllPlan {
  std::vector<int64_t> send_rows;     // per destination rank
  std::vector<int64_t> recv_rows;     // per source rank
  std::vector<int64_t> expert_major;  // expert-major row j is received row expert_major[j]
  std::vector<int64_t> offsets;       // [local experts + 1] over the expert-major rows
};

// `counts` [E]: this rank's rows per expert (expert e lives on rank e / (E / ranks)); `arriving` [ranks ·
// local experts]: block s holds source s's rows for each of this rank's experts (the all-to-all of counts).
AllToAllPlan plan_all_to_all(const std::vector<int64_t>& counts, const std::vector<int64_t>& arriving, int64_t ranks);

}  // namespace moetune::model
