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
  MOETUNE_CHECK(scan.num_heads > 0 && scan.head_dim > 0 && scan.state_size > 0 && scan.num_groups > 0 &&
                    scan.num_heads % scan.num_groups == 0,
                "{}: {} heads of {} with {} groups of state {} (mamba_num_heads must be a multiple of n_groups)", op,
                scan.num_heads, scan.head_dim, scan.num_groups, scan.state_size);
  const int64_t rows = in.x.tensor.defined() && in.x.tensor.dim() == 2 ? in.x.tensor.size(0) : -1;
  const Mamba2ScanDims d{rows, scan.num_heads,     scan.head_dim,     scan.num_groups, scan.state_size,
                         1,    float(scan.dt_min), float(scan.dt_max)};
  const int64_t bc = d.groups * d.state;
  Mamba2ScanPointers p{strided_operand(op, "x", in.x, rows, d.heads * d.head_dim),
                       strided_operand(op, "dt", in.dt, rows, d.heads), strided_operand(op, "B", in.b, rows, bc),
                       strided_operand(op, "C", in.c, rows, bc)};
  const Tensor* per_head[] = {&params.dt_bias, &params.a_log, &params.d};
  const char* names[] = {"dt_bias", "A_log", "D"};
  for (int i = 0; i < 3; ++i) {
    check_gpu_tensor(op, names[i], *per_head[i], {DType::BF16, DType::F32});
    check_shape(op, names[i], *per_head[i], {d.heads});
  }
  MOETUNE_CHECK(params.a_log.dtype() == params.dt_bias.dtype() && params.d.dtype() == params.dt_bias.dtype(),
                "{}: dt_bias, A_log and D must share a dtype", op);
  p.dt_bias = params.dt_bias.raw_data();
  p.a_log = params.a_log.raw_data();
  p.d = params.d.raw_data();
  p.params_bf16 = params.dt_bias.dtype() == DType::BF16;
  check_gpu_tensor(op, "state", state, DType::F32, {d.heads, d.head_dim, d.state});
  const StridedBf16 out = strided_operand(op, "y", y, rows, d.heads * d.head_dim);
  if (rows == 0) return;
  gpu::check(launch_mamba2_scan_step(d, p, device_data<float>(state), out, gpu::stream()), "mamba2_scan_step kernel");
}

}  // namespace moetune::ops::cuda
