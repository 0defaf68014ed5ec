#include "moetune/model/moe_variant.h"

#include "moetune/ops/sigmoid_router.h"

namespace moetune::model {
ops::GroupLimitedRouter group_limited(const RouterSpec& r) {
  return {r.top_k, r.num_groups, r.topk_groups, r.renormalize, r.scaling_factor};
}

ops::SoftmaxTopkOptions softmax_topk_options(const RouterSpec& r) {
  return {r.num_groups, r.topk_groups, float(r.scaling_factor)};
}

bool is_sigmoid_group_limited(const RouterSpec& r) {
  return r.score == RouterScore::Sigmoid && !r.topk_before_softmax && !r.bias;
}

bool cpu_runs_router(const RouterSpec& r) {
  return r.is_softmax_then_grouped_topk() || r.is_topk_then_softmax() || is_sigmoid_group_limited(r);
}

ops::Routing route(const RouterSpec& router, const Tensor& logits, const Tensor& correction_bias) {
  if (is_sigmoid_group_limited(router)) return ops::sigmoid_router_forward(logits, correction_bias, group_limited(router));
  if (router.is_topk_then_softmax()) return ops::router_topk_then_softmax_forward(logits, router.top_k);
  ops::SoftmaxTopkOptions options = softmax_topk_options(router);
  if (router.correction_bias) options.choice_bias = correction_bias;  // ERNIE 4.5's: for the choice only
  return ops::router_topk_forward(logits, router.top_k, router.renormalize, options);
}

ops::Routing route_chosen(const RouterSpec& router, const Tensor& logits, const std::vector<int32_t>& chosen) {
  if (router.is_softmax_then_grouped_topk())
    return ops::router_topk_weigh(logits, chosen, router.top_k, router.renormalize, softmax_topk_options(router));
  if (router.is_topk_then_softmax()) return ops::router_topk_then_softmax_weigh(logits, chosen, router.top_k);
  MOETUNE_CHECK(is_sigmoid_group_limited(router), "route_chosen: a router the CPU does not run");
  return ops::sigmoid_router_weigh(logits, chosen, group_limited(router));
}

Tensor route_backward(const RouterSpec& router, const ops::Routing& routing, const std::vector<float>& dweight) {
  if (is_sigmoid_group_limited(router)) return ops::sigmoid_router_backward(routing, dweight, group_limited(router));
  if (router.is_topk_then_softmax()) return ops::router_topk_then_softmax_backward(routing, dweight);
  return ops::router_topk_backward(routing, dweight);
}

ops::ExpertVariant expert_variant(const MlpSpec& experts, const MoeParams& p) {
  ops::ExpertVariant variant{p.gate_up_bias.value, p.down_bias.value, std::nullopt};
  if (experts.activation == Activation::ClampedSwiGLU) variant.clamp = experts.clamp;
  variant.relu_squared = experts.activation == Activation::ReluSquared;
  variant.gate = experts.gate;
  return variant;
}

ops::ExpertBiasGrads expert_bias_grads(const MoeParams& p) { return {p.gate_up_bias.grad, p.down_bias.grad}; }

}  // namespace moetune::model
