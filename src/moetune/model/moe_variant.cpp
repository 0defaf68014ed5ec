#include "moetune/model/moe_variant.h"

namespace moetune::model {

ops::Routing route(const RouterSpec& router, const Tensor& logits) {
  if (router.is_topk_then_softmax()) return ops::router_topk_then_softmax_forward(logits, router.top_k);
  return ops::router_topk_forward(logits, router.top_k, router.renormalize);
}

Tensor route_backward(const RouterSpec& router, const ops::Routing& routing, const std::vector<float>& dweight) {
  if (router.is_topk_then_softmax()) return ops::router_topk_then_softmax_backward(routing, dweight);
  return ops::router_topk_backward(routing, dweight);
}

ops::ExpertVariant expert_variant(const MlpSpec& experts, const MoeParams& p) {
  ops::ExpertVariant variant{p.gate_up_bias.value, p.down_bias.value, std::nullopt};
  if (experts.activation == Activation::ClampedSwiGLU) variant.clamp = experts.clamp;
  return variant;
}

ops::ExpertBiasGrads expert_bias_grads(const MoeParams& p) { return {p.gate_up_bias.grad, p.down_bias.grad}; }

}  // namespace moetune::model
