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

namespace {
// y as a [T, W] BF16 matrix: [T, heads, d] views flattened.
Tensor as_rows(std::string_view op, const char* name, const Tensor& y) {
  check_gpu_tensor(op, name, y, {DType::BF16});
  MOETUNE_CHECK(y.dim() >= 2, "{}: {} must be a [T, ...] tensor, got {}", op, name, y.str());
  return y.view({y.size(0), -1});
}
}  // namespace

void sigmoid_gated(const Tensor& y, const ColumnBlock& logits, const Tensor& out) {
  constexpr std::string_view op = "sigmoid_gated";
  const Tensor ys = as_rows(op, "y", y), outs = as_rows(op, "out", out);
  const int64_t rows = ys.size(0), width = ys.size(1);
  check_shape(op, "out", outs, ys.shape());
  const StridedBf16 gate = strided_operand(op, "logits", logits, rows, width);
  MOETUNE_CHECK(!overlaps(out, logits.tensor), "{}: out {} overlaps the logits", op, out.str());
  gpu::check(launch_sigmoid_gated(ys.raw_data(), gate.data, gate.ld, outs.raw_data(), rows, width, gpu::stream()),
             "sigmoid_gated kernel");
}

void sigmoid_gated_backward(const Tensor& dout, const Tensor& y, const ColumnBlock& logits, const Tensor& dy,
                            const ColumnBlock& dlogits) {
  constexpr std::string_view op = "sigmoid_gated_backward";
  const Tensor ys = as_rows(op, "y", y), douts = as_rows(op, "dout", dout), dys = as_rows(op, "dy", dy);
  const int64_t rows = ys.size(0), width = ys.size(1);
  check_shape(op, "dout", douts, ys.shape());
  check_shape(op, "dy", dys, ys.shape());
  const StridedBf16 gate = strided_operand(op, "logits", logits, rows, width);
  const StridedBf16 dgate = strided_operand(op, "dlogits", dlogits, rows, width);
  MOETUNE_CHECK(!overlaps(dlogits.tensor, dout) && !overlaps(dlogits.tensor, y) && !overlaps(dy, y),
                "{}: a gradient shares memory with an input it is computed from", op);
  gpu::check(launch_sigmoid_gated_backward(douts.raw_data(), ys.raw_data(), gate.data, gate.ld, dys.raw_data(),
                                           dgate.data, dgate.ld, rows, width, gpu::stream()),
             "sigmoid_gated_backward kernel");
}

}  // namespace moetune::ops::cuda
