#include "moetune/ops/cuda/expert_gemv.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/expert_gemv_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {

void expert_up_activation(const Tensor& x, const Tensor& up, const Tensor& expert_ids, const Tensor& activated,
                          ExpertActivation activation) {
  constexpr std::string_view op = "expert_up_activation";
  const bool gated = activation == ExpertActivation::SwiGLU;
  check_gpu_tensor(op, "up", up, {DType::BF16});
  MOETUNE_CHECK(up.dim() == 3 && (!gated || up.size(1) % 2 == 0), "{}: up {} must be [E, {}, H]", op, up.str(),
                gated ? "2I" : "I");
  const int64_t inner = gated ? up.size(1) / 2 : up.size(1), hidden = up.size(2);
  check_gpu_tensor(op, "x", x, DType::BF16, {1, hidden});
  check_gpu_tensor(op, "expert_ids", expert_ids, {DType::I32});
  MOETUNE_CHECK(expert_ids.dim() == 2 && expert_ids.size(0) == 1, "{}: expert_ids {} must be [1, k]", op,
                expert_ids.str());
  const int64_t top_k = expert_ids.size(1);
  check_gpu_tensor(op, "activated", activated, DType::BF16, {top_k, inner});
  gpu::check(launch_expert_up_activation(x.raw_data(), up.raw_data(), device_data<int32_t>(expert_ids),
                                         activated.raw_data(), top_k, inner, hidden, gated, gpu::stream()),
             "expert_up_activation kernel");
}

void expert_down_combine(const Tensor& activated, const Tensor& down, const Tensor& expert_ids, const Tensor& weights,
                         const Tensor& residual, const Tensor& out) {
  constexpr std::string_view op = "expert_down_combine";
  check_gpu_tensor(op, "down", down, {DType::BF16});
  MOETUNE_CHECK(down.dim() == 3, "{}: down {} must be [E, H, I]", op, down.str());
  const int64_t hidden = down.size(1), inner = down.size(2);
  check_gpu_tensor(op, "expert_ids", expert_ids, {DType::I32});
  MOETUNE_CHECK(expert_ids.dim() == 2 && expert_ids.size(0) == 1, "{}: expert_ids {} must be [1, k]", op,
                expert_ids.str());
  const int64_t top_k = expert_ids.size(1);
  check_gpu_tensor(op, "activated", activated, DType::BF16, {top_k, inner});
  check_gpu_tensor(op, "weights", weights, DType::F32, {1, top_k});
  check_gpu_tensor(op, "residual", residual, DType::BF16, {1, hidden});
  check_gpu_tensor(op, "out", out, DType::BF16, {1, hidden});
  gpu::check(launch_expert_down_combine(activated.raw_data(), down.raw_data(), device_data<int32_t>(expert_ids),
                                        device_data<float>(weights), residual.raw_data(), out.raw_data(), top_k, inner,
                                        hidden, gpu::stream()),
             "expert_down_combine kernel");
}

}  // namespace moetune::ops::cuda
