#include "moetune/text/jinja_budget.h"

#include <utility>
#include <vector>

#include "moetune/core/error.h"

namespace moetune::text::jinja {

void RenderBudget::spend(int64_t units) {
  spent_ += units;
  if (spent_ > max_work_)
    fail("the template does more than {} steps of work (a runaway loop or an ever-growing value?)", max_work_);
}

void RenderBudget::built(const Value& value) {
  if (value.is_string()) {
    const auto bytes = int64_t(value.as_string().size());
    if (bytes > kMaxValueBytes) fail("a string of more than {} bytes", kMaxValueBytes);
    return spend(1 + bytes / 64);
  }
  if (!value.is_list() && !value.is_dict()) return;
  std::vector<std::pair<const Json*, int>> pending{{&value.data(), 1}};
  int64_t nodes = 0;
  while (!pending.empty()) {
    const auto [node, depth] = pending.back();
    pending.pop_back();
    if (++nodes > kMaxValueNodes) fail("a list or dict of more than {} values", kMaxValueNodes);
    if (depth > kMaxValueDepth) fail("a value nested deeper than {} levels", kMaxValueDepth);
    if (node->is_structured())
      for (const Json& child : *node) pending.emplace_back(&child, depth + 1);
  }
  spend(nodes);
}

void RenderBudget::wrote(const std::string& out) const {
  if (int64_t(out.size()) > kMaxRenderOutputBytes) fail("the template writes more than {} bytes", kMaxRenderOutputBytes);
}

}  // namespace moetune::text::jinja
