#include "moetune/ops/cuda/expert_bias.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/expert_bias_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

// The group count E, after checking rows [R, N] against bias-like [E, N] and offsets I32 [E + 1].
int64_t checked_experts(std::string_view op, const Tensor& rows, std::string_view rows_name, const Tensor& bias,
                        std::string_view bias_name, const Tensor& offsets) {
  check_gpu_tensor(op, rows_name, rows, {DType::BF16});
  check_gpu_tensor(op, bias_name, bias, {DType::BF16, DType::F32});
  check_gpu_tensor(op, "offsets", offsets, {DType::I32});
  MOETUNE_CHECK(rows.dim() == 2 && bias.dim() == 2 && bias.size(1) == rows.size(1),
                "{}: {} {} must be [R, N] and {} {} [E, N]", op, rows_name, rows.str(), bias_name, bias.str());
  const int64_t experts = bias.size(0);
  check_shape(op, "offsets", offsets, {experts + 1});
  check_fits_int32(op, "experts", experts);
  return experts;
}

}  // namespace

void expert_bias_add(const Tensor& y, const Tensor& bias, const Tensor& offsets) {
  constexpr std::string_view op = "expert_bias_add";
  const int64_t experts = checked_experts(op, y, "y", bias, "bias", offsets);
  gpu::check(launch_expert_bias_add(y.raw_data(), y.size(0), y.size(1), bias.raw_data(), bias.dtype() == DType::BF16,
                                    device_data<int32_t>(offsets), int(experts), gpu::stream()),
             fmt::format("{} of {}", op, y.str()));
}

void expert_bias_grad(const Tensor& dy, const Tensor& offsets, const Tensor& dbias) {
  constexpr std::string_view op = "expert_bias_grad";
  const int64_t experts = checked_experts(op, dy, "dy", dbias, "dbias", offsets);
  MOETUNE_CHECK(!overlaps(dbias, dy), "{}: dbias {} overlaps dy", op, dbias.str());
  gpu::check(launch_expert_bias_grad(dy.raw_data(), dy.size(1), device_data<int32_t>(offsets), int(experts),
                                     dbias.raw_data(), dbias.dtype() == DType::BF16, gpu::stream()),
             fmt::format("{} of {}", op, dy.str()));
}

}  // namespace moetune::ops::cuda
