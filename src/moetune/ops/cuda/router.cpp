#include "moetune/ops/cuda/router.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/router_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

// The [T, E] shape of the logits, within the kernels' limits for top-k.
void expect_router_logits(const Tensor& logits, int64_t top_k, std::string_view op) {
  check_gpu_tensor(op, "logits", logits);
  MOETUNE_CHECK(logits.dtype() == DType::F32 && logits.dim() == 2, "{}: logits must be F32 [T, E], got {}", op,
                logits.str());
  const int64_t experts = logits.size(1);
  MOETUNE_CHECK(experts >= 1 && experts <= kRouterMaxExperts, "{}: {} experts (logits {}); the GPU router takes 1 to {}",
                op, experts, logits.str(), kRouterMaxExperts);
  MOETUNE_CHECK(top_k >= 1 && top_k <= experts && top_k <= kRouterMaxTopK,
                "{}: top-{} of {} experts; the GPU router takes 1 ≤ k ≤ min(E, {})", op, top_k, experts,
                kRouterMaxTopK);
}

}  // namespace

void router_topk_forward(const Tensor& logits, int64_t top_k, bool normalize, const Tensor& expert_ids,
                         const Tensor& weights, const SoftmaxTopkOptions& options) {
  constexpr std::string_view op = "router_topk_forward";
  expect_router_logits(logits, top_k, op);
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  check_gpu_tensor(op, "expert_ids", expert_ids, DType::I32, {tokens, top_k});
  check_gpu_tensor(op, "weights", weights, DType::F32, {tokens, top_k});
  const int64_t groups = options.num_groups, kept = options.topk_groups;
  MOETUNE_CHECK(groups >= 1 && groups <= kRouterMaxGroups && experts % groups == 0 && kept >= 1 && kept <= groups &&
                    top_k <= kept * (experts / groups),
                "{}: top-{} of {} experts in the best {} of {} groups; the GPU router takes 1 to {} groups dividing "
                "the experts, keeping enough experts for k",
                op, top_k, experts, kept, groups, kRouterMaxGroups);
  const Tensor& bias = options.choice_bias;
  if (bias.defined()) {
    check_gpu_tensor(op, "choice_bias", bias, DType::F32, {experts});
    MOETUNE_CHECK(groups == 1, "{}: a choice bias with {} groups (one group only)", op, groups);
  }
  const SoftmaxGroupLimit limit{int(groups), int(kept), options.scaling,
                                bias.defined() ? device_data<float>(bias) : nullptr};
  gpu::check(launch_router_topk_forward(device_data<float>(logits), tokens, int(experts), int(top_k), normalize, limit,
                                        device_data<int32_t>(expert_ids), device_data<float>(weights), gpu::stream()),
             fmt::format("{} of {}", op, logits.str()));
}

void router_topk_backward(const Tensor& logits, const Tensor& expert_ids, const Tensor& weights, const Tensor& dweights,
                          bool normalize, const Tensor& dlogits, float scaling) {
  constexpr std::string_view op = "router_topk_backward";
  check_gpu_tensor(op, "expert_ids", expert_ids);
  MOETUNE_CHECK(expert_ids.dim() == 2, "{}: expert_ids must be I32 [T, k], got {}", op, expert_ids.str());
  const int64_t top_k = expert_ids.size(1);
  expect_router_logits(logits, top_k, op);
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  check_gpu_tensor(op, "expert_ids", expert_ids, DType::I32, {tokens, top_k});
  check_gpu_tensor(op, "weights", weights, DType::F32, {tokens, top_k});
  check_gpu_tensor(op, "dweights", dweights, DType::F32, {tokens, top_k});
  check_gpu_tensor(op, "dlogits", dlogits, DType::F32, {tokens, experts});
  gpu::check(
      launch_router_topk_backward(device_data<float>(logits), device_data<int32_t>(expert_ids),
                                  device_data<float>(weights), device_data<float>(dweights), tokens, int(experts),
                                  int(top_k), normalize, scaling, device_data<float>(dlogits), gpu::stream()),
      fmt::format("{} of {}", op, logits.str()));
}

}  // namespace moetune::ops::cuda
