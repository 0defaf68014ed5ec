#include "moetune/ops/cuda/norm.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/norm_kernels.h"

namespace moetune::ops::cuda {
namespace {

// Width of the rows, after checking x [..., W] against weight [W].
int64_t checked_width(std::string_view op, const Tensor& x, const Tensor& weight) {
  check_gpu_tensor(op, "x", x, {DType::BF16});
  check_gpu_tensor(op, "weight", weight, {DType::BF16});
  MOETUNE_CHECK(weight.dim() == 1, "{}: weight {} must be one-dimensional", op, weight.str());
  const int64_t width = weight.size(0);
  MOETUNE_CHECK(x.dim() >= 1 && x.size(-1) == width, "{}: x {} does not end in the weight's width {}", op, x.str(),
                width);
  MOETUNE_CHECK(width > 0, "{}: empty rows (weight {})", op, weight.str());
  // The backward keeps a [W] fp32 partial in shared memory.
  MOETUNE_CHECK(width <= 32768, "{}: rows of {} elements are wider than the kernel supports (32768)", op, width);
  return width;
}

}  // namespace

void rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, float weight_offset) {
  constexpr std::string_view op = "rms_norm_forward";
  const int64_t width = checked_width(op, x, weight);
  check_gpu_tensor(op, "y", y, {DType::BF16});
  check_shape(op, "y", y, x.shape());
  MOETUNE_CHECK(!overlaps(y, weight), "{}: y {} overlaps the weight", op, y.str());
  MOETUNE_CHECK(!overlaps(y, x) || y.raw_data() == x.raw_data(), "{}: y {} partly overlaps x", op, y.str());
  gpu::check(launch_rms_norm_forward(x.raw_data(), weight.raw_data(), y.raw_data(), x.numel() / width, width,
                                     float(eps), gpu::stream(), {}, weight_offset),
             "rms_norm_forward kernel");
}

void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps, const Tensor& dx,
                       const Tensor& dweight, const Tensor& residual, float weight_offset) {
  constexpr std::string_view op = "rms_norm_backward";
  const int64_t width = checked_width(op, x, weight);
  check_gpu_tensor(op, "dy", dy, {DType::BF16});
  check_shape(op, "dy", dy, x.shape());
  check_gpu_tensor(op, "dx", dx, {DType::BF16});
  check_shape(op, "dx", dx, x.shape());
  if (dweight.defined()) {  // undefined: a frozen norm weight
    check_gpu_tensor(op, "dweight", dweight, {DType::BF16, DType::F32});
    check_shape(op, "dweight", dweight, weight.shape());
  }
  if (residual.defined()) {
    check_gpu_tensor(op, "residual", residual, {DType::BF16});
    check_shape(op, "residual", residual, x.shape());
  }
  // dx may be dy or the residual exactly (each element is read before the same thread writes it), but a
  // partial overlap, or overlap with x, the weight or dweight, would change inputs other threads still read.
  MOETUNE_CHECK(!overlaps(dx, x) && !overlaps(dx, weight) && !overlaps(dx, dweight),
                "{}: dx {} overlaps x, weight or dweight", op, dx.str());
  MOETUNE_CHECK(!overlaps(dx, dy) || dx.raw_data() == dy.raw_data(), "{}: dx {} partly overlaps dy", op, dx.str());
  MOETUNE_CHECK(!overlaps(dx, residual) || dx.raw_data() == residual.raw_data(),
                "{}: dx {} partly overlaps the residual", op, dx.str());
  MOETUNE_CHECK(!overlaps(dweight, x) && !overlaps(dweight, dy) && !overlaps(dweight, weight),
                "{}: dweight {} overlaps an input", op, dweight.str());

  const int64_t rows = x.numel() / width;
  if (rows == 0) return;
  const size_t workspace_bytes = rms_norm_backward_workspace_bytes(rows, width);
  void* workspace = gpu::allocate(workspace_bytes);
  const cudaError_t status = launch_rms_norm_backward(
      dy.raw_data(), x.raw_data(), weight.raw_data(), residual.defined() ? residual.raw_data() : nullptr, dx.raw_data(),
      device_data<void>(dweight), dweight.defined() && dweight.dtype() == DType::BF16, rows, width, float(eps),
      workspace, gpu::stream(), {}, weight_offset);
  gpu::release(workspace);  // stream-ordered: freed only after the kernels above have run
  gpu::check(status, "rms_norm_backward kernels");
}

void rms_norm_forward(const ColumnBlock& x, const Tensor& weight, double eps, const Tensor& y, float weight_offset) {
  constexpr std::string_view op = "rms_norm_forward";
  check_gpu_tensor(op, "weight", weight, {DType::BF16});
  MOETUNE_CHECK(weight.dim() == 1, "{}: weight {} must be one-dimensional", op, weight.str());
  const int64_t width = weight.size(0), rows = x.tensor.defined() && x.tensor.dim() == 2 ? x.tensor.size(0) : -1;
  const StridedBf16 in = strided_operand(op, "x", x, rows, width);
  check_gpu_tensor(op, "y", y, {DType::BF16});
  check_shape(op, "y", y, {rows, width});
  MOETUNE_CHECK(!overlaps(y, x.tensor) && !overlaps(y, weight), "{}: y {} overlaps x's matrix or the weight", op,
                y.str());
  gpu::check(launch_rms_norm_forward(in.data, weight.raw_data(), y.raw_data(), rows, width, float(eps), gpu::stream(),
                                     {in.ld, width}, weight_offset),
             "rms_norm_forward kernel (column block)");
}

void rms_norm_backward(const Tensor& dy, const ColumnBlock& x, const Tensor& weight, double eps, const ColumnBlock& dx,
                       const Tensor& dweight, float weight_offset) {
  constexpr std::string_view op = "rms_norm_backward";
  check_gpu_tensor(op, "weight", weight, {DType::BF16});
  MOETUNE_CHECK(weight.dim() == 1, "{}: weight {} must be one-dimensional", op, weight.str());
  const int64_t width = weight.size(0), rows = x.tensor.defined() && x.tensor.dim() == 2 ? x.tensor.size(0) : -1;
  const StridedBf16 in = strided_operand(op, "x", x, rows, width);
  const StridedBf16 out = strided_operand(op, "dx", dx, rows, width);
  check_gpu_tensor(op, "dy", dy, {DType::BF16});
  check_shape(op, "dy", dy, {rows, width});
  if (dweight.defined()) {
    check_gpu_tensor(op, "dweight", dweight, {DType::BF16, DType::F32});
    check_shape(op, "dweight", dweight, weight.shape());
  }
  // dx's matrix is written where other threads still read x, dy or the weight if they share memory.
  MOETUNE_CHECK(!overlaps(dx.tensor, x.tensor) && !overlaps(dx.tensor, dy) && !overlaps(dx.tensor, weight) &&
                    !overlaps(dx.tensor, dweight),
                "{}: dx's matrix {} overlaps an input or dweight", op, dx.tensor.str());
  MOETUNE_CHECK(!overlaps(dweight, x.tensor) && !overlaps(dweight, dy) && !overlaps(dweight, weight),
                "{}: dweight {} overlaps an input", op, dweight.str());
  if (rows == 0) return;
  void* workspace = gpu::allocate(rms_norm_backward_workspace_bytes(rows, width));
  const cudaError_t status =
      launch_rms_norm_backward(dy.raw_data(), in.data, weight.raw_data(), nullptr, out.data, device_data<void>(dweight),
                               dweight.defined() && dweight.dtype() == DType::BF16, rows, width, float(eps), workspace,
                               gpu::stream(), {in.ld, out.ld}, weight_offset);
  gpu::release(workspace);  // stream-ordered: freed only after the kernels above have run
  gpu::check(status, "rms_norm_backward kernels (column block)");
}

}  // namespace moetune::ops::cuda
