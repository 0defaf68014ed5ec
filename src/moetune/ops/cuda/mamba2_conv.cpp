#include "moetune/ops/cuda/mamba2_conv.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/mamba2_conv_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr std::string_view kForward = "mamba2_conv_forward", kBackward = "mamba2_conv_backward";

void check_flags(std::string_view op, std::string_view name, const Tensor& flags, int64_t rows, bool optional) {
  if (optional && !flags.defined()) return;
  check_gpu_tensor(op, name, flags, DType::U8, {rows});
}

Mamba2ConvPointers checked_inputs(std::string_view op, const ColumnBlock& xbc, const Tensor& weight,
                                  const Tensor& bias, const Tensor& starts, const Tensor& valid,
                                  Mamba2ConvDims* dims) {
  *dims = checked_conv_operands(op, xbc, weight, bias);
  const int64_t rows = dims->rows;
  const StridedBf16 x = strided_operand(op, "xbc", xbc, rows, dims->channels);
  check_flags(op, "starts", starts, rows, false);
  check_flags(op, "valid", valid, rows, true);
  return {x, weight.raw_data(), device_data<void>(bias), device_data<uint8_t>(starts), device_data<uint8_t>(valid)};
}

}  // namespace

Mamba2ConvDims checked_conv_operands(std::string_view op, const ColumnBlock& xbc, const Tensor& weight,
                                     const Tensor& bias) {
  check_gpu_tensor(op, "weight", weight, {DType::BF16});
  MOETUNE_CHECK(weight.dim() == 2, "{}: weight {} must be [channels, kernel]", op, weight.str());
  const int64_t channels = weight.size(0), kernel = weight.size(1);
  MOETUNE_CHECK(kernel >= 1 && kernel <= kMamba2MaxConvKernel,
                "{}: conv_kernel {} is outside what the GPU conv supports (1..{})", op, kernel, kMamba2MaxConvKernel);
  if (bias.defined()) check_gpu_tensor(op, "bias", bias, DType::BF16, {channels});
  return {xbc.tensor.defined() && xbc.tensor.dim() == 2 ? xbc.tensor.size(0) : -1, channels, kernel};
}

Tensor upload_row_flags(const std::vector<uint8_t>& flags) {
  if (flags.empty()) return {};
  return Tensor::from_vector(flags, {int64_t(flags.size())}).to(Device::cuda());
}

void mamba2_conv_forward(const ColumnBlock& xbc, const Tensor& weight, const Tensor& bias, const Tensor& starts,
                         const Tensor& valid, const ColumnBlock& out) {
  Mamba2ConvDims dims;
  const Mamba2ConvPointers in = checked_inputs(kForward, xbc, weight, bias, starts, valid, &dims);
  const StridedBf16 o = strided_operand(kForward, "out", out, dims.rows, dims.channels);
  gpu::check(launch_mamba2_conv_forward(dims, in, o, gpu::stream()), "mamba2_conv_forward kernel");
}

void mamba2_conv_backward(const ColumnBlock& dout, const ColumnBlock& xbc, const Tensor& weight, const Tensor& bias,
                          const Tensor& starts, const Tensor& valid, const ColumnBlock& dxbc, const Tensor& dweight,
                          const Tensor& dbias) {
  Mamba2ConvDims dims;
  const Mamba2ConvPointers in = checked_inputs(kBackward, xbc, weight, bias, starts, valid, &dims);
  const StridedBf16 g = strided_operand(kBackward, "dout", dout, dims.rows, dims.channels);
  const StridedBf16 dx = strided_operand(kBackward, "dxbc", dxbc, dims.rows, dims.channels);
  MOETUNE_CHECK(!overlaps(dxbc.tensor, xbc.tensor) && !overlaps(dxbc.tensor, dout.tensor),
                "{}: dxbc {} overlaps xbc or dout", kBackward, dxbc.tensor.str());
  if (dweight.defined()) check_gpu_tensor(kBackward, "dweight", dweight, {DType::BF16, DType::F32});
  if (dweight.defined()) check_shape(kBackward, "dweight", dweight, weight.shape());
  if (dbias.defined()) {
    check_gpu_tensor(kBackward, "dbias", dbias, {DType::BF16, DType::F32});
    check_shape(kBackward, "dbias", dbias, {dims.channels});
  }
  MOETUNE_CHECK(!dweight.defined() || !dbias.defined() || dweight.dtype() == dbias.dtype(),
                "{}: dweight {} and dbias {} must share a dtype", kBackward, dweight.str(), dbias.str());
  const bool bf16_grads = (dweight.defined() ? dweight : dbias).defined() &&
                          (dweight.defined() ? dweight : dbias).dtype() == DType::BF16;
  void* workspace = gpu::allocate(mamba2_conv_backward_workspace_bytes(dims));
  const cudaError_t status = launch_mamba2_conv_backward(dims, in, g, dx, device_data<void>(dweight),
                                                         device_data<void>(dbias), bf16_grads, workspace,
                                                         gpu::stream());
  gpu::release(workspace);
  gpu::check(status, "mamba2_conv_backward kernels");
}

void mask_padding_rows(const ColumnBlock& in, const Tensor& valid, const ColumnBlock& out) {
  constexpr std::string_view op = "mask_padding_rows";
  const int64_t rows = in.tensor.defined() && in.tensor.dim() == 2 ? in.tensor.size(0) : -1, width = in.width();
  const StridedBf16 from = strided_operand(op, "in", in, rows, width), to = strided_operand(op, "out", out, rows, width);
  check_flags(op, "valid", valid, rows, false);
  gpu::check(launch_mask_rows(from, to, rows, width, device_data<uint8_t>(valid), gpu::stream()), "mask_rows kernel");
}

}  // namespace moetune::ops::cuda
