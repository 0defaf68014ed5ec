#include "moetune/ops/cuda/mla_absorbed.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/mla_absorbed_kernels.h"

namespace moetune::ops::cuda {
namespace {

MlaAbsorbedShape checked_shape(std::string_view op, const Tensor& per_head, const Tensor& kv_b,
                               const MlaAbsorbedWidths& w) {
  check_gpu_tensor(op, "kv_b", kv_b, {DType::BF16});
  MOETUNE_CHECK(per_head.dim() == 3, "{}: {} must be [T, heads, width]", op, per_head.str());
  const int64_t heads = per_head.size(1);
  MOETUNE_CHECK(w.nope > 0 && w.nope <= 256 && w.rope >= 0 && w.v_dim > 0 && w.latent > 0,
                "{}: widths nope {} (1..256), rope {}, v {}, latent {}", op, w.nope, w.rope, w.v_dim, w.latent);
  check_shape(op, "kv_b", kv_b, {heads * (w.nope + w.v_dim), w.latent});
  MlaAbsorbedShape s;
  s.rows = per_head.size(0) * heads;
  s.heads = int(heads);
  s.nope = int(w.nope);
  s.rope = int(w.rope);
  s.v_dim = int(w.v_dim);
  s.latent = int(w.latent);
  return s;
}

}  // namespace

void mla_absorb_q(const Tensor& q, const Tensor& kv_b, const MlaAbsorbedWidths& widths, const Tensor& q_abs) {
  constexpr std::string_view op = "mla_absorb_q";
  check_gpu_tensor(op, "q", q, {DType::BF16});
  MlaAbsorbedShape s = checked_shape(op, q, kv_b, widths);
  s.q_width = int(q.size(2));
  MOETUNE_CHECK(s.q_width >= s.nope + s.rope, "{}: q {} is narrower than nope {} + rope {}", op, q.str(), s.nope,
                s.rope);
  check_gpu_tensor(op, "q_abs", q_abs, DType::BF16, {q.size(0), q.size(1), widths.latent + widths.rope});
  gpu::check(launch_mla_absorb_q(q.raw_data(), kv_b.raw_data(), q_abs.raw_data(), s, gpu::stream()),
             "mla_absorb_q kernel");
}

void mla_absorb_out(const Tensor& o_latent, const Tensor& kv_b, const MlaAbsorbedWidths& widths,
                    const Tensor& attended) {
  constexpr std::string_view op = "mla_absorb_out";
  check_gpu_tensor(op, "o_latent", o_latent, {DType::BF16});
  MlaAbsorbedShape s = checked_shape(op, o_latent, kv_b, widths);
  check_shape(op, "o_latent", o_latent, {o_latent.size(0), s.heads, widths.latent});
  check_gpu_tensor(op, "attended", attended, {DType::BF16});
  MOETUNE_CHECK(attended.dim() == 3 && attended.size(0) == o_latent.size(0) && attended.size(1) == s.heads &&
                    attended.size(2) >= s.v_dim,
                "{}: attended {} must be [{}, {}, >= {}]", op, attended.str(), o_latent.size(0), s.heads, s.v_dim);
  s.out_width = int(attended.size(2));
  gpu::check(launch_mla_absorb_out(o_latent.raw_data(), kv_b.raw_data(), attended.raw_data(), s, gpu::stream()),
             "mla_absorb_out kernel");
}

}  // namespace moetune::ops::cuda
