// Which router op an MoE block's RouterSpec runs on the CPU: the softmax-then-top-k router (Qwen, Mixtral) or
// DeepSeek-V3's sigmoid group-limited router. One place for the choice, so the block calls route() and
// route_backward() whatever the family.
#pragma once

#include <vector>

#include "moetune/model/model_spec.h"
#include "moetune/ops/router.h"
#include "moetune/ops/sigmoid_router.h"

namespace moetune::model {

// DeepSeek-V3's router: sigmoid scores, optional correction bias, groups, scaling.
inline bool is_sigmoid_group_limited(const RouterSpec& r) {
  return r.score == RouterScore::Sigmoid && !r.topk_before_softmax && !r.bias;
}

// Whether the CPU MoE block runs this router at all.
inline bool cpu_runs_router(const RouterSpec& r) { return r.is_softmax_then_topk() || is_sigmoid_group_limited(r); }

inline ops::GroupLimitedRouter group_limited(const RouterSpec& r) {
  return {r.top_k, r.num_groups, r.topk_groups, r.renormalize, r.scaling_factor};
}

// logits [T, E]; correction_bias [E] or undefined.
inline ops::Routing route(const RouterSpec& r, const Tensor& logits, const Tensor& correction_bias) {
  if (is_sigmoid_group_limited(r)) return ops::sigmoid_router_forward(logits, correction_bias, group_limited(r));
  return ops::router_topk_forward(logits, r.top_k, r.renormalize);
}

inline Tensor route_backward(const RouterSpec& r, const ops::Routing& routing, const std::vector<float>& dweight) {
  if (is_sigmoid_group_limited(r)) return ops::sigmoid_router_backward(routing, dweight, group_limited(r));
  return ops::router_topk_backward(routing, dweight);
}

}  // namespace moetune::model
