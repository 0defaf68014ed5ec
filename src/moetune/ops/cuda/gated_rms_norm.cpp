#include "moetune/ops/cuda/gated_rms_norm.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gated_rms_norm_kernels.h"

namespace moetune::ops::cuda {
namespace {

// The width is x's; the weight covers it or one group.
GatedRmsNormDims checked_dims(std::string_view op, const ColumnBlock& x, const Tensor& weight, int64_t group_size,
                              double eps, GatePlacement placement) {
  check_gpu_tensor(op, "weight", weight, {DType::BF16});
  MOETUNE_CHECK(weight.dim() == 1, "{}: weight {} must be one-dimensional", op, weight.str());
  const int64_t width = x.width();
  MOETUNE_CHECK(group_size > 0 && width % group_size == 0,
                "{}: {} columns do not split into groups of {} (n_groups must divide the mamba width)", op, width,
                group_size);
  MOETUNE_CHECK(weight.size(0) == width || weight.size(0) == group_size,
                "{}: weight {} covers neither the {} columns nor one group of {}", op, weight.str(), width, group_size);
  const int64_t rows = x.tensor.defined() && x.tensor.dim() == 2 ? x.tensor.size(0) : -1;
  return {rows, width, group_size, float(eps), placement == GatePlacement::AfterNorm, weight.size(0) != width};
}

}  // namespace

void gated_rms_norm_forward(const ColumnBlock& x, const ColumnBlock& z, const Tensor& weight, int64_t group_size,
                            double eps, const ColumnBlock& y, GatePlacement placement) {
  constexpr std::string_view op = "gated_rms_norm_forward";
  const GatedRmsNormDims d = checked_dims(op, x, weight, group_size, eps, placement);
  const StridedBf16 xs = strided_operand(op, "x", x, d.rows, d.width), zs = strided_operand(op, "z", z, d.rows, d.width);
  const StridedBf16 ys = strided_operand(op, "y", y, d.rows, d.width);
  MOETUNE_CHECK(!overlaps(y.tensor, x.tensor) && !overlaps(y.tensor, z.tensor), "{}: y {} overlaps x or z", op,
                y.tensor.str());
  gpu::check(launch_gated_rms_norm_forward(d, xs, zs, weight.raw_data(), ys, gpu::stream()),
             "gated_rms_norm_forward kernel");
}

void gated_rms_norm_backward(const ColumnBlock& dy, const ColumnBlock& x, const ColumnBlock& z, const Tensor& weight,
                             int64_t group_size, double eps, const ColumnBlock& dx, const ColumnBlock& dz,
                             const Tensor& dweight, GatePlacement placement) {
  constexpr std::string_view op = "gated_rms_norm_backward";
  const GatedRmsNormDims d = checked_dims(op, x, weight, group_size, eps, placement);
  const StridedBf16 xs = strided_operand(op, "x", x, d.rows, d.width), zs = strided_operand(op, "z", z, d.rows, d.width);
  const StridedBf16 gs = strided_operand(op, "dy", dy, d.rows, d.width);
  const StridedBf16 dxs = strided_operand(op, "dx", dx, d.rows, d.width), dzs = strided_operand(op, "dz", dz, d.rows, d.width);
  for (const ColumnBlock* out : {&dx, &dz})
    for (const ColumnBlock* input : {&dy, &x, &z})
      MOETUNE_CHECK(!overlaps(out->tensor, input->tensor), "{}: gradient {} shares memory with an input", op,
                    out->tensor.str());
  if (dweight.defined()) {
    check_gpu_tensor(op, "dweight", dweight, {DType::BF16, DType::F32});
    check_shape(op, "dweight", dweight, weight.shape());
  }
  void* workspace = gpu::allocate(gated_rms_norm_backward_workspace_bytes(d));
  const cudaError_t status =
      launch_gated_rms_norm_backward(d, gs, xs, zs, weight.raw_data(), dxs, dzs, device_data<void>(dweight),
                                     dweight.defined() && dweight.dtype() == DType::BF16, workspace, gpu::stream());
  gpu::release(workspace);
  gpu::check(status, "gated_rms_norm_backward kernels");
}

}  // namespace moetune::ops::cuda
