#include "moetune/ops/cuda/mamba2_scan.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/mamba2_scan_kernels.h"

namespace moetune::ops::cuda {
namespace {

int64_t max_shared_bytes() {
  static const int64_t bytes = [] {
    int device = 0, value = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    return int64_t(value);
  }();
  return bytes;
}

Mamba2ScanDims checked_dims(std::string_view op, const Mamba2ScanBlocks& in, const Mamba2Scan& scan,
                            int64_t chunk_size) {
  MOETUNE_CHECK(chunk_size > 0 && chunk_size <= kMamba2MaxChunk, "{}: chunk_size {} is outside what the GPU scan takes (1..{})",
                op, chunk_size, kMamba2MaxChunk);
  Mamba2ScanDims dims = checked_scan_dims(op, in, scan);
  dims.chunk = chunk_size;
  const size_t shared = mamba2_scan_shared_bytes(dims);
  MOETUNE_CHECK(int64_t(shared) <= max_shared_bytes(),
                "{}: chunk_size {} with head_dim {} and ssm_state_size {} needs {} bytes of shared memory per block; "
                "this GPU has {} (use a smaller mamba chunk_size)",
                op, chunk_size, scan.head_dim, scan.state_size, shared, max_shared_bytes());
  return dims;
}

struct Operands {
  StridedBf16 x, dt, b, c;
};

Operands operands(std::string_view op, const Mamba2ScanBlocks& blocks, const Mamba2ScanDims& d, const char* prefix) {
  const std::string p(prefix);
  return {strided_operand(op, p + "x", blocks.x, d.rows, d.heads * d.head_dim),
          strided_operand(op, p + "dt", blocks.dt, d.rows, d.heads),
          strided_operand(op, p + "B", blocks.b, d.rows, d.groups * d.state),
          strided_operand(op, p + "C", blocks.c, d.rows, d.groups * d.state)};
}

Mamba2ScanPointers pointers(std::string_view op, const Mamba2ScanBlocks& in, const Mamba2ScanParams& params,
                            const Mamba2ScanDims& d, const Tensor& starts) {
  Mamba2ScanPointers p = checked_scan_operands(op, in, params, d);
  if (!starts.defined()) return p;
  check_gpu_tensor(op, "starts", starts, DType::U8, {d.rows});
  p.starts = device_data<uint8_t>(starts);
  return p;
}

}  // namespace

Mamba2ScanDims checked_scan_dims(std::string_view op, const Mamba2ScanBlocks& in, const Mamba2Scan& scan) {
  MOETUNE_CHECK(scan.num_heads > 0 && scan.head_dim > 0 && scan.state_size > 0 && scan.num_groups > 0 &&
                    scan.num_heads % scan.num_groups == 0,
                "{}: {} heads of {} with {} groups of state {} (mamba_num_heads must be a multiple of n_groups)", op,
                scan.num_heads, scan.head_dim, scan.num_groups, scan.state_size);
  const int64_t rows = in.x.tensor.defined() && in.x.tensor.dim() == 2 ? in.x.tensor.size(0) : -1;
  return {rows, scan.num_heads,     scan.head_dim,     scan.num_groups, scan.state_size,
          1,    float(scan.dt_min), float(scan.dt_max)};
}

Mamba2ScanPointers checked_scan_operands(std::string_view op, const Mamba2ScanBlocks& in,
                                         const Mamba2ScanParams& params, const Mamba2ScanDims& d) {
  const Operands o = operands(op, in, d, "");
  const Tensor* per_head[] = {&params.dt_bias, &params.a_log, &params.d};
  const char* names[] = {"dt_bias", "A_log", "D"};
  for (int i = 0; i < 3; ++i) check_gpu_tensor(op, names[i], *per_head[i], {DType::BF16, DType::F32});
  for (int i = 0; i < 3; ++i) check_shape(op, names[i], *per_head[i], {d.heads});
  MOETUNE_CHECK(params.a_log.dtype() == params.dt_bias.dtype() && params.d.dtype() == params.dt_bias.dtype(),
                "{}: dt_bias, A_log and D must share a dtype", op);
  return {o.x,
          o.dt,
          o.b,
          o.c,
          params.dt_bias.raw_data(),
          params.a_log.raw_data(),
          params.d.raw_data(),
          params.dt_bias.dtype() == DType::BF16,
          nullptr};
}

void mamba2_scan_forward(const Mamba2ScanBlocks& in, const Mamba2ScanParams& params, const Mamba2Scan& scan,
                         int64_t chunk_size, const Tensor& starts, const ColumnBlock& y, const Tensor& state) {
  constexpr std::string_view op = "mamba2_scan_forward";
  const Mamba2ScanDims d = checked_dims(op, in, scan, chunk_size);
  Mamba2ScanPointers p = pointers(op, in, params, d, starts);
  if (state.defined()) {
    check_gpu_tensor(op, "state", state, DType::F32, {d.heads, d.head_dim, d.state});
    p.state = device_data<float>(state);
  }
  const StridedBf16 out = strided_operand(op, "y", y, d.rows, d.heads * d.head_dim);
  void* workspace = gpu::allocate(mamba2_scan_forward_workspace_bytes(d));
  const cudaError_t status = launch_mamba2_scan_forward(d, p, out, workspace, gpu::stream());
  gpu::release(workspace);
  gpu::check(status, "mamba2_scan_forward kernels");
}

void mamba2_scan_backward(const ColumnBlock& dy, const Mamba2ScanBlocks& in, const Mamba2ScanParams& params,
                          const Mamba2Scan& scan, int64_t chunk_size, const Tensor& starts,
                          const Mamba2ScanBlocks& grads, const Mamba2ScanParams& dparams) {
  constexpr std::string_view op = "mamba2_scan_backward";
  const Mamba2ScanDims d = checked_dims(op, in, scan, chunk_size);
  const Mamba2ScanPointers p = pointers(op, in, params, d, starts);
  const StridedBf16 g = strided_operand(op, "dy", dy, d.rows, d.heads * d.head_dim);
  const Operands o = operands(op, grads, d, "d");
  for (const ColumnBlock* out : {&grads.x, &grads.dt, &grads.b, &grads.c})
    for (const ColumnBlock* input : {&in.x, &in.dt, &in.b, &in.c, &dy})
      MOETUNE_CHECK(!overlaps(out->tensor, input->tensor), "{}: gradient {} shares memory with an input", op,
                    out->tensor.str());
  Mamba2ScanGradPointers gp{o.x, o.dt, o.b, o.c};
  bool have_dtype = false;
  const Tensor* per_head[] = {&dparams.dt_bias, &dparams.a_log, &dparams.d};
  void** slots[] = {&gp.dt_bias, &gp.a_log, &gp.d};
  for (int i = 0; i < 3; ++i) {
    const Tensor& t = *per_head[i];
    if (!t.defined()) continue;
    check_gpu_tensor(op, "per-head parameter gradient", t, {DType::BF16, DType::F32});
    check_shape(op, "per-head parameter gradient", t, {d.heads});
    MOETUNE_CHECK(!have_dtype || (t.dtype() == DType::BF16) == gp.grads_bf16,
                  "{}: the per-head parameter gradients must share a dtype", op);
    have_dtype = true;
    gp.grads_bf16 = t.dtype() == DType::BF16;
    *slots[i] = t.raw_data();
  }
  void* workspace = gpu::allocate(mamba2_scan_backward_workspace_bytes(d));
  const cudaError_t status = launch_mamba2_scan_backward(d, p, g, gp, workspace, gpu::stream());
  gpu::release(workspace);
  gpu::check(status, "mamba2_scan_backward kernels");
}

}  // namespace moetune::ops::cuda
