#include "moetune/ops/cuda/router_topk_softmax.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/router_kernels.h"
#include "moetune/ops/cuda/router_topk_softmax_kernels.h"

namespace moetune::ops::cuda {
namespace {

void check_top_k(std::string_view op, int64_t experts, int64_t top_k) {
  MOETUNE_CHECK(experts >= 1 && experts <= kRouterMaxExperts, "{}: {} experts; the GPU router takes 1 to {}", op,
                experts, kRouterMaxExperts);
  MOETUNE_CHECK(top_k >= 1 && top_k <= experts && top_k <= kRouterMaxTopK,
                "{}: top-{} of {} experts; the GPU router takes 1 ≤ k ≤ min(E, {})", op, top_k, experts,
                kRouterMaxTopK);
}

}  // namespace

void router_topk_softmax_forward(const Tensor& logits, int64_t top_k, const Tensor& expert_ids, const Tensor& weights) {
  constexpr std::string_view op = "router_topk_softmax_forward";
  check_gpu_tensor(op, "logits", logits, {DType::F32});
  MOETUNE_CHECK(logits.dim() == 2, "{}: logits must be F32 [T, E], got {}", op, logits.str());
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  check_top_k(op, experts, top_k);
  check_gpu_tensor(op, "expert_ids", expert_ids, DType::I32, {tokens, top_k});
  check_gpu_tensor(op, "weights", weights, DType::F32, {tokens, top_k});
  gpu::check(launch_router_topk_softmax_forward(device_data<float>(logits), tokens, int(experts), int(top_k),
                                                device_data<int32_t>(expert_ids), device_data<float>(weights),
                                                gpu::stream()),
             fmt::format("{} of {}", op, logits.str()));
}

void router_topk_softmax_backward(const Tensor& expert_ids, const Tensor& weights, const Tensor& dweights,
                                  const Tensor& dlogits) {
  constexpr std::string_view op = "router_topk_softmax_backward";
  check_gpu_tensor(op, "expert_ids", expert_ids, {DType::I32});
  check_gpu_tensor(op, "dlogits", dlogits, {DType::F32});
  MOETUNE_CHECK(expert_ids.dim() == 2 && dlogits.dim() == 2 && dlogits.size(0) == expert_ids.size(0),
                "{}: expert_ids {} must be I32 [T, k] and dlogits {} F32 [T, E]", op, expert_ids.str(), dlogits.str());
  const int64_t tokens = expert_ids.size(0), top_k = expert_ids.size(1), experts = dlogits.size(1);
  check_top_k(op, experts, top_k);
  check_gpu_tensor(op, "weights", weights, DType::F32, {tokens, top_k});
  check_gpu_tensor(op, "dweights", dweights, DType::F32, {tokens, top_k});
  gpu::check(launch_router_topk_softmax_backward(device_data<int32_t>(expert_ids), device_data<float>(weights),
                                                 device_data<float>(dweights), tokens, int(experts), int(top_k),
                                                 device_data<float>(dlogits), gpu::stream()),
             fmt::format("{} of {}", op, dlogits.str()));
}

}  // namespace moetune::ops::cuda
