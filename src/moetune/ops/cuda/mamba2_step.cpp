#include "moetune/ops/cuda/mamba2_step.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/cuda/mamba2_step_kernels.h"

namespace moetune::ops::cuda {

void mamba2_conv_step(const ColumnBlock& xbc, const Tensor& weight, const Tensor& bias, const Tensor& window,
                      const ColumnBlock& out) {
  constexpr std::string_view op = "mamba2_conv_step";
  const auto [rows, channels, kernel] = checked_conv_operands(op, xbc, weight, bias);
  const StridedBf16 x = strided_operand(op, "xbc", xbc, rows, channels);
  const StridedBf16 o = strided_operand(op, "out", out, rows, channels);
  check_gpu_tensor(op, "window", window, DType::BF16, {kernel - 1, channels});
  MOETUNE_CHECK(!overlaps(out.tensor, xbc.tensor) && !overlaps(out.tensor, window),
                "{}: out {} overlaps xbc or the window", op, out.tensor.str());
  if (rows == 0) return;
  gpu::check(launch_mamba2_conv_step(rows, channels, kernel, x, weight.raw_data(), device_data<void>(bias),
                                     window.raw_data(), o, gpu::stream()),
             "mamba2_conv_step kernel");
}

void mamba2_scan_step(const Mamba2ScanBlocks& in, const Mamba2ScanParams& params, const Mamba2Scan& scan,
                      const Tensor& state, const ColumnBlock& y) {
  constexpr std::string_view op = "mamba2_scan_step";
  const Mamba2ScanDims d = checked_scan_dims(op, in, scan);
  const Mamba2ScanPointers p = checked_scan_operands(op, in, params, d);
  const int64_t rows = d.rows;
  check_gpu_tensor(op, "state", state, DType::F32, {d.heads, d.head_dim, d.state});
  const StridedBf16 out = strided_operand(op, "y", y, rows, d.heads * d.head_dim);
  if (rows == 0) return;
  gpu::check(launch_mamba2_scan_step(d, p, device_data<float>(state), out, gpu::stream()), "mamba2_scan_step kernel");
}

}  // namespace moetune::ops::cuda
