#include "moetune/ops/cuda/qkv_rope.h"

#include <tuple>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/qkv_rope_kernels.h"

namespace moetune::ops::cuda {
namespace {

// The shared shape checks of the forward and the backward: q-like [T, nq, d] and k-like [T, nkv, d] tensors fix
// the shape; qkv-like must be [T, (nq + gate_heads + 2·nkv)·d], v-like [T, nkv, d].
QkvShape checked_shape(std::string_view op, const Tensor& q_like, std::string_view q_name, const Tensor& k_like,
                       std::string_view k_name, const Tensor& v_like, std::string_view v_name, const Tensor& qkv_like,
                       std::string_view qkv_name, int64_t gate_heads) {
  check_gpu_tensor(op, q_name, q_like, {DType::BF16});
  check_gpu_tensor(op, k_name, k_like, {DType::BF16});
  check_gpu_tensor(op, v_name, v_like, {DType::BF16});
  check_gpu_tensor(op, qkv_name, qkv_like, {DType::BF16});
  MOETUNE_CHECK(q_like.dim() == 3 && k_like.dim() == 3, "{}: {} {} and {} {} must be [T, heads, head_dim]", op,
                q_name, q_like.str(), k_name, k_like.str());
  const QkvShape shape{.tokens = q_like.size(0),
                       .q_heads = q_like.size(1),
                       .kv_heads = k_like.size(1),
                       .head_dim = q_like.size(2),
                       .gate_heads = gate_heads};
  MOETUNE_CHECK(gate_heads >= 0, "{}: {} gate heads", op, gate_heads);
  MOETUNE_CHECK(shape.head_dim > 0 && shape.head_dim % 2 == 0, "{}: head_dim {} must be even and positive", op,
                shape.head_dim);
  MOETUNE_CHECK(shape.head_dim <= 256, "{}: head_dim {} is wider than the kernel supports (256)", op, shape.head_dim);
  MOETUNE_CHECK(shape.q_heads > 0 && shape.kv_heads > 0, "{}: {} {} and {} {} need at least one head each", op,
                q_name, q_like.str(), k_name, k_like.str());
  check_shape(op, k_name, k_like, {shape.tokens, shape.kv_heads, shape.head_dim});
  check_shape(op, v_name, v_like, {shape.tokens, shape.kv_heads, shape.head_dim});
  check_shape(op, qkv_name, qkv_like,
              {shape.tokens, (shape.q_heads + gate_heads + 2 * shape.kv_heads) * shape.head_dim});
  return shape;
}

// inv_freq undefined: no RoPE (the positions are not read).
void check_rope_inputs(std::string_view op, const Tensor& inv_freq, const Tensor& positions, QkvShape shape) {
  if (!inv_freq.defined()) return;
  check_gpu_tensor(op, "inv_freq", inv_freq, {DType::F32});
  check_shape(op, "inv_freq", inv_freq, {shape.head_dim / 2});
  check_gpu_tensor(op, "positions", positions, {DType::I32});
  check_shape(op, "positions", positions, {shape.tokens});
}

const void* optional_norm(std::string_view op, std::string_view name, const Tensor& norm, QkvShape shape) {
  if (!norm.defined()) return nullptr;
  check_gpu_tensor(op, name, norm, {DType::BF16});
  check_shape(op, name, norm, {shape.head_dim});
  return norm.raw_data();
}

}  // namespace

void qkv_norm_rope_forward(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, double eps,
                           const Tensor& inv_freq, const Tensor& positions, const Tensor& q, const Tensor& k,
                           const Tensor& v, double rotated_scale, float norm_weight_offset, int64_t gate_heads) {
  constexpr std::string_view op = "qkv_norm_rope_forward";
  QkvShape shape = checked_shape(op, q, "q", k, "k", v, "v", qkv, "qkv", gate_heads);
  shape.rotated_scale = float(rotated_scale);
  shape.norm_weight_offset = norm_weight_offset;
  check_rope_inputs(op, inv_freq, positions, shape);
  const void* q_weight = optional_norm(op, "q_norm", q_norm, shape);
  const void* k_weight = optional_norm(op, "k_norm", k_norm, shape);
  for (const Tensor* out : {&q, &k, &v})
    MOETUNE_CHECK(!overlaps(*out, qkv), "{}: output {} overlaps qkv", op, out->str());
  gpu::check(launch_qkv_norm_rope_forward(qkv.raw_data(), q_weight, k_weight, float(eps),
                                          inv_freq.defined() ? static_cast<const float*>(inv_freq.raw_data()) : nullptr,
                                          positions.defined() ? static_cast<const int32_t*>(positions.raw_data()) : nullptr, q.raw_data(),
                                          k.raw_data(), v.raw_data(), shape, gpu::stream()),
             "qkv_norm_rope_forward kernel");
}

void qkv_norm_rope_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& qkv,
                            const Tensor& q_norm, const Tensor& k_norm, double eps, const Tensor& inv_freq,
                            const Tensor& positions, const Tensor& dqkv, const Tensor& dq_norm, const Tensor& dk_norm,
                            double rotated_scale, float norm_weight_offset, int64_t gate_heads) {
  constexpr std::string_view op = "qkv_norm_rope_backward";
  QkvShape shape = checked_shape(op, dq, "dq", dk, "dk", dv, "dv", dqkv, "dqkv", gate_heads);
  shape.rotated_scale = float(rotated_scale);
  shape.norm_weight_offset = norm_weight_offset;
  check_gpu_tensor(op, "qkv", qkv, {DType::BF16});
  check_shape(op, "qkv", qkv, dqkv.shape());
  check_rope_inputs(op, inv_freq, positions, shape);
  const void* q_weight = optional_norm(op, "q_norm", q_norm, shape);
  const void* k_weight = optional_norm(op, "k_norm", k_norm, shape);
  for (const auto& [norm, dnorm, name] :
       {std::tuple{&q_norm, &dq_norm, "dq_norm"}, std::tuple{&k_norm, &dk_norm, "dk_norm"}}) {
    if (!dnorm->defined()) continue;
    MOETUNE_CHECK(norm->defined(), "{}: {} is given but its norm weight is not", op, name);
    check_gpu_tensor(op, name, *dnorm, {DType::BF16, DType::F32});
    check_shape(op, name, *dnorm, {shape.head_dim});
    for (const Tensor* input : {&dq, &dk, &dv, &qkv, &dqkv})
      MOETUNE_CHECK(!overlaps(*dnorm, *input), "{}: {} {} overlaps another argument", op, name, dnorm->str());
  }
  for (const Tensor* input : {&dq, &dk, &dv, &qkv})
    MOETUNE_CHECK(!overlaps(dqkv, *input), "{}: dqkv {} overlaps an input", op, dqkv.str());

  const bool accumulate = dq_norm.defined() || dk_norm.defined();
  void* workspace = accumulate && shape.tokens > 0 ? gpu::allocate(qkv_norm_rope_backward_workspace_bytes(shape))
                                                   : nullptr;
  const cudaError_t status = launch_qkv_norm_rope_backward(
      dq.raw_data(), dk.raw_data(), dv.raw_data(), qkv.raw_data(), q_weight, k_weight, float(eps),
      inv_freq.defined() ? static_cast<const float*>(inv_freq.raw_data()) : nullptr, positions.defined() ? static_cast<const int32_t*>(positions.raw_data()) : nullptr,
      dqkv.raw_data(), dq_norm.defined() ? dq_norm.raw_data() : nullptr,
      dk_norm.defined() ? dk_norm.raw_data() : nullptr, dq_norm.defined() && dq_norm.dtype() == DType::BF16,
      dk_norm.defined() && dk_norm.dtype() == DType::BF16, shape, workspace, gpu::stream());
  if (workspace != nullptr) gpu::release(workspace);  // stream-ordered: after the kernels above
  gpu::check(status, "qkv_norm_rope_backward kernels");
}

}  // namespace moetune::ops::cuda
