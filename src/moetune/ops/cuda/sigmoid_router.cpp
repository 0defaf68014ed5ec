#include "moetune/ops/cuda/sigmoid_router.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/router_kernels.h"
#include "moetune/ops/cuda/sigmoid_router_kernels.h"

namespace moetune::ops::cuda {
namespace {

SigmoidRouterShape checked_shape(std::string_view op, const Tensor& logits, const GroupLimitedRouter& r) {
  check_gpu_tensor(op, "logits", logits);
  MOETUNE_CHECK(logits.dtype() == DType::F32 && logits.dim() == 2, "{}: logits must be F32 [T, E], got {}", op,
                logits.str());
  const int64_t experts = logits.size(1);
  MOETUNE_CHECK(experts >= 1 && experts <= kRouterMaxExperts && r.num_groups >= 1 && r.num_groups <= kRouterMaxGroups &&
                    experts % r.num_groups == 0 && experts / r.num_groups >= 2 && r.topk_groups >= 1 &&
                    r.topk_groups <= r.num_groups && r.top_k >= 1 && r.top_k <= kRouterMaxTopK &&
                    r.top_k <= r.topk_groups * (experts / r.num_groups),
                "{}: {} experts in {} groups, top-{} groups, top-{} experts; the GPU router takes at most {} experts, "
                "{} groups of at least 2 and k ≤ {}",
                op, experts, r.num_groups, r.topk_groups, r.top_k, kRouterMaxExperts, kRouterMaxGroups, kRouterMaxTopK);
  return {logits.size(0), int(experts), int(r.top_k), int(r.num_groups), int(r.topk_groups), r.renormalize,
          float(r.scaling_factor)};
}

}  // namespace

void sigmoid_router_forward(const Tensor& logits, const Tensor& correction_bias, const GroupLimitedRouter& router,
                            const Tensor& expert_ids, const Tensor& weights) {
  constexpr std::string_view op = "sigmoid_router_forward";
  const SigmoidRouterShape s = checked_shape(op, logits, router);
  if (correction_bias.defined()) check_gpu_tensor(op, "correction_bias", correction_bias, DType::F32, {s.experts});
  check_gpu_tensor(op, "expert_ids", expert_ids, DType::I32, {s.tokens, s.top_k});
  check_gpu_tensor(op, "weights", weights, DType::F32, {s.tokens, s.top_k});
  gpu::check(launch_sigmoid_router_forward(device_data<float>(logits),
                                           correction_bias.defined() ? device_data<float>(correction_bias) : nullptr, s,
                                           device_data<int32_t>(expert_ids), device_data<float>(weights), gpu::stream()),
             fmt::format("{} of {}", op, logits.str()));
}

void sigmoid_router_backward(const Tensor& logits, const Tensor& expert_ids, const Tensor& dweights,
                             const GroupLimitedRouter& router, const Tensor& dlogits) {
  constexpr std::string_view op = "sigmoid_router_backward";
  const SigmoidRouterShape s = checked_shape(op, logits, router);
  check_gpu_tensor(op, "expert_ids", expert_ids, DType::I32, {s.tokens, s.top_k});
  check_gpu_tensor(op, "dweights", dweights, DType::F32, {s.tokens, s.top_k});
  check_gpu_tensor(op, "dlogits", dlogits, DType::F32, {s.tokens, s.experts});
  gpu::check(launch_sigmoid_router_backward(device_data<float>(logits), device_data<int32_t>(expert_ids),
                                            device_data<float>(dweights), s, device_data<float>(dlogits), gpu::stream()),
             fmt::format("{} of {}", op, logits.str()));
}

}  // namespace moetune::ops::cuda
