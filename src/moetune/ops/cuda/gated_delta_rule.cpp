#include "moetune/ops/cuda/gated_delta_rule.h"

#include <span>
#include <string>
#include <string_view>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/shared_memory_opt_in.h"

namespace moetune::ops::cuda {
namespace {

GatedDeltaDims checked_dims(std::string_view op, const GatedDeltaBlocks& in, const GatedDeltaShape& shape) {
  MOETUNE_CHECK(shape.num_k_heads > 0 && shape.num_v_heads > 0 && shape.num_v_heads % shape.num_k_heads == 0,
                "{}: {} value heads do not share {} key heads evenly (linear_num_value_heads must be a multiple of "
                "linear_num_key_heads)",
                op, shape.num_v_heads, shape.num_k_heads);
  MOETUNE_CHECK(shape.k_head_dim > 0 && shape.k_head_dim <= kGatedDeltaMaxHeadDim && shape.v_head_dim > 0 &&
                    shape.v_head_dim <= kGatedDeltaMaxHeadDim,
                "{}: key head dim {} and value head dim {}: the GPU kernels take 1..{} for each", op, shape.k_head_dim,
                shape.v_head_dim, kGatedDeltaMaxHeadDim);
  const int64_t rows = in.q.tensor.defined() && in.q.tensor.dim() == 2 ? in.q.tensor.size(0) : -1;
  check_fits_int32(op, "rows", rows);
  const GatedDeltaDims d{rows, shape.num_k_heads, shape.num_v_heads, shape.k_head_dim, shape.v_head_dim};
  const size_t shared = gated_delta_rule_shared_bytes(d);
  int limit = 0;
  gpu::check(gpu::dynamic_shared_memory_limit(limit), "the shared memory limit");
  MOETUNE_CHECK(int64_t(shared) <= int64_t(limit),
                "{}: key head dim {} and value head dim {} need {} bytes of shared memory per block; this GPU has {}",
                op, shape.k_head_dim, shape.v_head_dim, shared, limit);
  return d;
}

struct Operands {
  StridedBf16 q, k, v, a, b;
};

Operands operands(std::string_view op, const GatedDeltaBlocks& blocks, const GatedDeltaDims& d, const char* prefix) {
  const std::string p(prefix);
  return {strided_operand(op, p + "q", blocks.q, d.rows, d.k_heads * d.k_dim),
          strided_operand(op, p + "k", blocks.k, d.rows, d.k_heads * d.k_dim),
          strided_operand(op, p + "v", blocks.v, d.rows, d.v_heads * d.v_dim),
          strided_operand(op, p + "a", blocks.a, d.rows, d.v_heads),
          strided_operand(op, p + "b", blocks.b, d.rows, d.v_heads)};
}

GatedDeltaPointers pointers(std::string_view op, const GatedDeltaBlocks& in, const Tensor& dt_bias, const Tensor& a_log,
                            const GatedDeltaDims& d, const Tensor& starts) {
  const Operands o = operands(op, in, d, "");
  check_gpu_tensor(op, "dt_bias", dt_bias, {DType::BF16, DType::F32});
  check_gpu_tensor(op, "A_log", a_log, {DType::BF16, DType::F32});
  check_shape(op, "dt_bias", dt_bias, {d.v_heads});
  check_shape(op, "A_log", a_log, {d.v_heads});
  MOETUNE_CHECK(dt_bias.dtype() == a_log.dtype(), "{}: dt_bias {} and A_log {} must share a dtype", op, dt_bias.str(),
                a_log.str());
  GatedDeltaPointers p{o.q, o.k, o.v, o.a, o.b, dt_bias.raw_data(), a_log.raw_data(), dt_bias.dtype() == DType::BF16};
  if (starts.defined()) {
    check_gpu_tensor(op, "starts", starts, DType::U8, {d.rows});
    p.starts = device_data<uint8_t>(starts);
  }
  return p;
}

// Split rows must be rows the flags restart (only the host's copy of the flags can say which: the caller's promise),
// ascending and inside [0, N): those the checks can see are checked.
GatedDeltaSplits splits(std::string_view op, const GatedDeltaDims& d, const Tensor& starts,
                        std::span<const int64_t> rows) {
  MOETUNE_CHECK(rows.empty() || starts.defined(), "{}: {} split rows given without document starts", op, rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    MOETUNE_CHECK(rows[i] >= 0 && rows[i] < d.rows && (i == 0 || rows[i] > rows[i - 1]),
                  "{}: split row {} (the {}th) is not ascending inside [0, {})", op, rows[i], i, d.rows);
  return {rows.data(), int64_t(rows.size())};
}

}  // namespace

void gated_delta_rule_forward(const GatedDeltaBlocks& in, const Tensor& dt_bias, const Tensor& a_log,
                              const GatedDeltaShape& shape, const Tensor& starts, const ColumnBlock& out,
                              const Tensor& state, std::span<const int64_t> split_rows) {
  constexpr std::string_view op = "gated_delta_rule_forward";
  const GatedDeltaDims d = checked_dims(op, in, shape);
  GatedDeltaPointers p = pointers(op, in, dt_bias, a_log, d, starts);
  if (state.defined()) {
    check_gpu_tensor(op, "state", state, DType::F32, {d.v_heads, d.k_dim, d.v_dim});
    p.state = device_data<float>(state);
  }
  const StridedBf16 o = strided_operand(op, "out", out, d.rows, d.v_heads * d.v_dim);
  for (const ColumnBlock* input : {&in.q, &in.k, &in.v, &in.a, &in.b})
    MOETUNE_CHECK(!overlaps(out.tensor, input->tensor), "{}: out {} shares memory with an input", op, out.tensor.str());
  void* workspace = gpu::allocate(gated_delta_rule_forward_workspace_bytes(d));
  const cudaError_t status =
      launch_gated_delta_rule_forward(d, p, o, splits(op, d, starts, split_rows), workspace, gpu::stream());
  gpu::release(workspace);
  gpu::check(status, "gated_delta_rule_forward kernels");
}

void gated_delta_rule_backward(const ColumnBlock& dout, const GatedDeltaBlocks& in, const Tensor& dt_bias,
                               const Tensor& a_log, const GatedDeltaShape& shape, const Tensor& starts,
                               const GatedDeltaBlocks& grads, const Tensor& d_dt_bias, const Tensor& d_a_log,
                               std::span<const int64_t> split_rows) {
  constexpr std::string_view op = "gated_delta_rule_backward";
  const GatedDeltaDims d = checked_dims(op, in, shape);
  const GatedDeltaPointers p = pointers(op, in, dt_bias, a_log, d, starts);
  const StridedBf16 g = strided_operand(op, "dout", dout, d.rows, d.v_heads * d.v_dim);
  const Operands o = operands(op, grads, d, "d");
  for (const ColumnBlock* out : {&grads.q, &grads.k, &grads.v, &grads.a, &grads.b})
    for (const ColumnBlock* input : {&in.q, &in.k, &in.v, &in.a, &in.b, &dout})
      MOETUNE_CHECK(!overlaps(out->tensor, input->tensor), "{}: gradient {} shares memory with an input", op,
                    out->tensor.str());
  GatedDeltaGradPointers gp{o.q, o.k, o.v, o.a, o.b};
  bool have_dtype = false;
  const Tensor* per_head[] = {&d_dt_bias, &d_a_log};
  void** slots[] = {&gp.dt_bias, &gp.a_log};
  for (int i = 0; i < 2; ++i) {
    const Tensor& t = *per_head[i];
    if (!t.defined()) continue;
    check_gpu_tensor(op, i == 0 ? "d(dt_bias)" : "d(A_log)", t, {DType::BF16, DType::F32});
    check_shape(op, i == 0 ? "d(dt_bias)" : "d(A_log)", t, {d.v_heads});
    MOETUNE_CHECK(!have_dtype || (t.dtype() == DType::BF16) == gp.grads_bf16,
                  "{}: d(dt_bias) and d(A_log) must share a dtype", op);
    have_dtype = true;
    gp.grads_bf16 = t.dtype() == DType::BF16;
    *slots[i] = t.raw_data();
  }
  void* workspace = gpu::allocate(gated_delta_rule_backward_workspace_bytes(d));
  const cudaError_t status =
      launch_gated_delta_rule_backward(d, p, g, gp, splits(op, d, starts, split_rows), workspace, gpu::stream());
  gpu::release(workspace);
  gpu::check(status, "gated_delta_rule_backward kernels");
}

}  // namespace moetune::ops::cuda
