#include "moetune/ops/cuda/gate.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gate_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {

void sigmoid_gated_add(const Tensor& base, const Tensor& y, const Tensor& logits, const Tensor& out) {
  constexpr std::string_view op = "sigmoid_gated_add";
  check_gpu_tensor(op, "y", y, {DType::BF16});
  MOETUNE_CHECK(y.dim() == 2, "{}: y must be [T, H], got {}", op, y.str());
  check_gpu_tensor(op, "base", base, DType::BF16, y.shape());
  check_gpu_tensor(op, "out", out, DType::BF16, y.shape());
  check_gpu_tensor(op, "logits", logits, DType::F32, {y.size(0), 1});
  gpu::check(launch_sigmoid_gated_add(base.raw_data(), y.raw_data(), device_data<float>(logits), out.raw_data(), y.size(0),
                                      y.size(1), gpu::stream()),
             "sigmoid_gated_add kernel");
}

void sigmoid_gated_add_backward(const Tensor& dout, const Tensor& y, const Tensor& logits, const Tensor& dy,
                                const Tensor& dlogits) {
  constexpr std::string_view op = "sigmoid_gated_add_backward";
  check_gpu_tensor(op, "y", y, {DType::BF16});
  MOETUNE_CHECK(y.dim() == 2, "{}: y must be [T, H], got {}", op, y.str());
  check_gpu_tensor(op, "dout", dout, DType::BF16, y.shape());
  check_gpu_tensor(op, "dy", dy, DType::BF16, y.shape());
  check_gpu_tensor(op, "logits", logits, DType::F32, {y.size(0), 1});
  check_gpu_tensor(op, "dlogits", dlogits, DType::F32, {y.size(0), 1});
  gpu::check(launch_sigmoid_gated_add_backward(dout.raw_data(), y.raw_data(), device_data<float>(logits), dy.raw_data(),
                                               device_data<float>(dlogits), y.size(0), y.size(1), gpu::stream()),
             "sigmoid_gated_add_backward kernel");
}

}  // namespace moetune::ops::cuda
