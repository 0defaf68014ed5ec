#include "moetune/ops/cuda/mla_qkv.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/mla_qkv_kernels.h"
#include "moetune/ops/mla_v_in_place.h"

namespace moetune::ops::cuda {
namespace {

MlaQkvShape shape_of(std::string_view op, const Tensor& qk, const Tensor& v, const MlaQkvLayout& l) {
  check_gpu_tensor(op, "q/k", qk);
  check_gpu_tensor(op, "v", v);
  MOETUNE_CHECK(qk.dim() == 3 && v.dim() == 3 && v.size(0) == qk.size(0) && v.size(1) == qk.size(1),
                "{}: q/k {} and v {} must be [T, heads, width] with the same T and heads", op, qk.str(), v.str());
  MlaQkvShape s{qk.size(0), int(qk.size(1)), int(l.nope), int(l.rope), int(l.v_dim), int(qk.size(2)), int(v.size(2)),
                l.interleaved, float(l.scale), l.rope};
  MOETUNE_CHECK(l.rope > 0 && l.rope % 2 == 0 && s.qk_width >= l.nope + l.rope && s.v_width >= l.v_dim,
                "{}: head widths q/k {} and v {} for nope {}, rope {} (even), v {}", op, s.qk_width, s.v_width, l.nope,
                l.rope, l.v_dim);
  return s;
}

// The same with v (dv) optional: undefined, its width is v_dim (attention reads it, writes its gradient, in place).
MlaQkvShape shape_of_optional_v(std::string_view op, const Tensor& qk, const Tensor& v, const MlaQkvLayout& l) {
  if (v.defined()) return shape_of(op, qk, v, l);
  check_gpu_tensor(op, "q/k", qk);
  MOETUNE_CHECK(qk.dim() == 3, "{}: q/k {} must be [T, heads, width]", op, qk.str());
  MlaQkvShape s{qk.size(0), int(qk.size(1)), int(l.nope), int(l.rope), int(l.v_dim), int(qk.size(2)), int(l.v_dim),
                l.interleaved, float(l.scale), l.rope};
  MOETUNE_CHECK(l.rope > 0 && l.rope % 2 == 0 && s.qk_width >= l.nope + l.rope && l.v_dim > 0,
                "{}: head width q/k {} for nope {}, rope {} (even), v {}", op, s.qk_width, l.nope, l.rope, l.v_dim);
  return s;
}

// k_rope (dk_rope) [T, rope], packed or a block of columns of a wider matrix (MLA's kv_a output): its address,
// with the shape's row stride set.
void* key_rope_operand(std::string_view op, std::string_view name, const ColumnBlock& block, MlaQkvShape& s) {
  const StridedBf16 operand = strided_operand(op, name, block, s.tokens, s.rope);
  s.k_rope_stride = operand.ld;
  return operand.data;
}

void check_common(std::string_view op, const MlaQkvShape& s, const Tensor& inv_freq, const Tensor& positions) {
  check_gpu_tensor(op, "inv_freq", inv_freq, DType::F32, {s.rope / 2});
  check_gpu_tensor(op, "positions", positions, DType::I32, {s.tokens});
}

// The in-place kernels rotate q's (dq's) own rope columns: its head width must be nope + rope.
void check_in_place_width(std::string_view op, const MlaQkvShape& s) {
  MOETUNE_CHECK(s.qk_width == s.nope + s.rope, "{}: q/k head width {} must be nope {} + rope {} to rotate q in place",
                op, s.qk_width, s.nope, s.rope);
}

}  // namespace

void mla_qkv_forward(const Tensor& q_proj, const Tensor& kv, const ColumnBlock& k_rope, const Tensor& inv_freq,
                     const Tensor& positions, const MlaQkvLayout& layout, const Tensor& q, const Tensor& k,
                     const Tensor& v) {
  constexpr std::string_view op = "mla_qkv_forward";
  MlaQkvShape s = shape_of(op, k, v, layout);
  check_common(op, s, inv_freq, positions);
  check_gpu_tensor(op, "kv", kv, DType::BF16, {s.tokens, s.heads, s.nope + s.v_dim});
  void* key_rope = key_rope_operand(op, "k_rope", k_rope, s);
  check_gpu_tensor(op, "k", k, DType::BF16, {s.tokens, s.heads, s.qk_width});
  check_gpu_tensor(op, "v", v, DType::BF16, {s.tokens, s.heads, s.v_width});
  if (q.defined()) {
    check_gpu_tensor(op, "q_proj", q_proj, DType::BF16, {s.tokens, s.heads, s.nope + s.rope});
    check_gpu_tensor(op, "q", q, DType::BF16, {s.tokens, s.heads, s.qk_width});
  }
  gpu::check(launch_mla_qkv_forward(q.defined() ? q_proj.raw_data() : nullptr, kv.raw_data(), key_rope,
                                    device_data<float>(inv_freq), device_data<int32_t>(positions),
                                    q.defined() ? q.raw_data() : nullptr, k.raw_data(), v.raw_data(), s, gpu::stream()),
             fmt::format("{} of {}", op, kv.str()));
}

void mla_qkv_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& inv_freq,
                      const Tensor& positions, const MlaQkvLayout& layout, const Tensor& dq_proj, const Tensor& dkv,
                      const ColumnBlock& dk_rope) {
  constexpr std::string_view op = "mla_qkv_backward";
  MlaQkvShape s = shape_of(op, dk, dv, layout);
  check_common(op, s, inv_freq, positions);
  check_gpu_tensor(op, "dk", dk, DType::BF16, {s.tokens, s.heads, s.qk_width});
  check_gpu_tensor(op, "dv", dv, DType::BF16, {s.tokens, s.heads, s.v_width});
  check_gpu_tensor(op, "dkv", dkv, DType::BF16, {s.tokens, s.heads, s.nope + s.v_dim});
  void* dkey_rope = key_rope_operand(op, "dk_rope", dk_rope, s);
  MOETUNE_CHECK(dq.defined() == dq_proj.defined(), "{}: dq and dq_proj must be both given or both left out", op);
  if (dq.defined()) {
    check_gpu_tensor(op, "dq", dq, DType::BF16, {s.tokens, s.heads, s.qk_width});
    check_gpu_tensor(op, "dq_proj", dq_proj, DType::BF16, {s.tokens, s.heads, s.nope + s.rope});
  }
  gpu::check(launch_mla_qkv_backward(dq.defined() ? dq.raw_data() : nullptr, dk.raw_data(), dv.raw_data(),
                                     device_data<float>(inv_freq), device_data<int32_t>(positions),
                                     dq.defined() ? dq_proj.raw_data() : nullptr, dkv.raw_data(), dkey_rope, s,
                                     gpu::stream()),
             fmt::format("{} of {}", op, dk.str()));
}

void mla_qkv_forward_in_place(const Tensor& q, const Tensor& kv, const ColumnBlock& k_rope, const Tensor& inv_freq,
                              const Tensor& positions, const MlaQkvLayout& layout, const Tensor& k, const Tensor& v) {
  constexpr std::string_view op = "mla_qkv_forward_in_place";
  MlaQkvShape s = shape_of_optional_v(op, k, v, layout);
  check_common(op, s, inv_freq, positions);
  check_in_place_width(op, s);
  check_gpu_tensor(op, "q", q, DType::BF16, {s.tokens, s.heads, s.qk_width});
  check_gpu_tensor(op, "kv", kv, DType::BF16, {s.tokens, s.heads, s.nope + s.v_dim});
  void* key_rope = key_rope_operand(op, "k_rope", k_rope, s);
  check_gpu_tensor(op, "k", k, DType::BF16, {s.tokens, s.heads, s.qk_width});
  if (v.defined()) check_gpu_tensor(op, "v", v, DType::BF16, {s.tokens, s.heads, s.v_width});
  MOETUNE_CHECK(v.defined() || mla_v_read_in_place(layout, s.heads, s.qk_width, s.k_rope_stride),
                "{}: v left out for a shape whose v must be built (nope {}, rope {}, v {}, {} heads)", op, s.nope,
                s.rope, s.v_dim, s.heads);
  gpu::check(launch_mla_qkv_forward_in_place(q.raw_data(), kv.raw_data(), key_rope, device_data<float>(inv_freq),
                                             device_data<int32_t>(positions), k.raw_data(),
                                             v.defined() ? v.raw_data() : nullptr, s, gpu::stream()),
             fmt::format("{} of {}", op, q.str()));
}

void mla_qkv_backward_in_place(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& inv_freq,
                               const Tensor& positions, const MlaQkvLayout& layout, const Tensor& dkv,
                               const ColumnBlock& dk_rope) {
  constexpr std::string_view op = "mla_qkv_backward_in_place";
  MlaQkvShape s = shape_of_optional_v(op, dk, dv, layout);
  check_common(op, s, inv_freq, positions);
  check_in_place_width(op, s);
  check_gpu_tensor(op, "dq", dq, DType::BF16, {s.tokens, s.heads, s.qk_width});
  check_gpu_tensor(op, "dk", dk, DType::BF16, {s.tokens, s.heads, s.qk_width});
  if (dv.defined()) check_gpu_tensor(op, "dv", dv, DType::BF16, {s.tokens, s.heads, s.v_width});
  MOETUNE_CHECK(dv.defined() || mla_v_read_in_place(layout, s.heads, s.qk_width, s.k_rope_stride),
                "{}: dv left out for a shape whose dkv must take it (nope {}, rope {}, v {}, {} heads)", op, s.nope,
                s.rope, s.v_dim, s.heads);
  check_gpu_tensor(op, "dkv", dkv, DType::BF16, {s.tokens, s.heads, s.nope + s.v_dim});
  void* dkey_rope = key_rope_operand(op, "dk_rope", dk_rope, s);
  gpu::check(launch_mla_qkv_backward_in_place(dq.raw_data(), dk.raw_data(), dv.defined() ? dv.raw_data() : nullptr,
                                              device_data<float>(inv_freq),
                                              device_data<int32_t>(positions), dkv.raw_data(), dkey_rope, s,
                                              gpu::stream()),
             fmt::format("{} of {}", op, dk.str()));
}

bool mla_v_read_in_place(const MlaQkvLayout& layout, int64_t heads, int64_t qk_width, int64_t k_rope_stride) {
  return mla_v_in_kv(heads, layout.nope, layout.rope, layout.v_dim, qk_width, k_rope_stride);
}

void mla_q_rope_in_place(const Tensor& q, const Tensor& inv_freq, const Tensor& positions, const MlaQkvLayout& layout,
                         bool backward) {
  constexpr std::string_view op = "mla_q_rope_in_place";
  check_gpu_tensor(op, "q", q);
  MOETUNE_CHECK(q.dim() == 3 && q.size(2) == layout.nope + layout.rope && layout.rope > 0 && layout.rope % 2 == 0,
                "{}: q {} must be [T, heads, nope + rope] for nope {}, rope {} (even)", op, q.str(), layout.nope,
                layout.rope);
  const MlaQkvShape s{q.size(0),          int(q.size(1)),     int(layout.nope),      int(layout.rope),
                      int(layout.v_dim),  int(q.size(2)),     int(layout.v_dim),     layout.interleaved,
                      float(layout.scale), layout.rope};
  check_gpu_tensor(op, "q", q, DType::BF16, {s.tokens, s.heads, s.qk_width});
  check_common(op, s, inv_freq, positions);
  gpu::check(launch_mla_q_rope_in_place(q.raw_data(), device_data<float>(inv_freq), device_data<int32_t>(positions), s,
                                        backward, gpu::stream()),
             fmt::format("{} of {}", op, q.str()));
}

void copy_leading_columns(const Tensor& src, const Tensor& dst) {
  constexpr std::string_view op = "copy_leading_columns";
  check_gpu_tensor(op, "src", src, {DType::BF16});
  check_gpu_tensor(op, "dst", dst, {DType::BF16});
  MOETUNE_CHECK(src.dim() >= 1 && dst.dim() == src.dim() && src.numel() / std::max<int64_t>(src.size(-1), 1) ==
                                                               dst.numel() / std::max<int64_t>(dst.size(-1), 1),
                "{}: src {} and dst {} must differ only in their last dim", op, src.str(), dst.str());
  const int64_t rows = dst.size(-1) > 0 ? dst.numel() / dst.size(-1) : 0;
  gpu::check(launch_copy_leading_columns(src.raw_data(), src.size(-1), dst.raw_data(), dst.size(-1), rows, gpu::stream()),
             fmt::format("{} of {} into {}", op, src.str(), dst.str()));
}

}  // namespace moetune::ops::cuda
