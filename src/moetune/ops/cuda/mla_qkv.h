// DeepSeek-V3's latent attention on the GPU between its projections and flash attention: q, k and v from the q
// projection, kv_b's per-head [k_nope | v] and the one shared rope key (RoPE on the rope columns only, as
// ops/mla_rope.h does it on the CPU), padded to head widths cuDNN takes; and the gradients back. All BF16 on the
// GPU but inv_freq (F32 [rope / 2]) and positions (I32 [T]); queued on gpu::stream(). k_rope and dk_rope may be
// a block of columns of a wider matrix (ops/cuda/column_block.h): MLA's kv_a output [T, latent + rope], one GEMM's.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"

namespace moetune::ops::cuda {

struct MlaQkvLayout {
  int64_t nope = 0, rope = 0, v_dim = 0;
  bool interleaved = false;
  double scale = 1.0;  // YaRN's attention factor on cos and sin
};

// q_proj [T, heads, nope + rope], kv [T, heads, nope + v_dim], k_rope [T, rope] -> q, k [T, heads, Wqk] and
// v [T, heads, Wv] (Wqk ≥ nope + rope, Wv ≥ v_dim: their shapes say; zero past the real columns). q undefined:
// k and v only, q_proj unread (where Wqk is nope + rope, q is q_proj rotated in place by mla_q_rope_in_place).
void mla_qkv_forward(const Tensor& q_proj, const Tensor& kv, const ColumnBlock& k_rope, const Tensor& inv_freq,
                     const Tensor& positions, const MlaQkvLayout& layout, const Tensor& q, const Tensor& k,
                     const Tensor& v);

// dq, dk [T, heads, Wqk], dv [T, heads, Wv] -> dq_proj [T, heads, nope + rope], dkv [T, heads, nope + v_dim],
// dk_rope [T, rope] (overwritten). dq and dq_proj undefined: dkv and dk_rope only (dq into dq_proj in place by
// mla_q_rope_in_place).
void mla_qkv_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& inv_freq,
                      const Tensor& positions, const MlaQkvLayout& layout, const Tensor& dq_proj, const Tensor& dkv,
                      const ColumnBlock& dk_rope);

// q [T, heads, nope + rope] in place: the rope columns of each head rotated as mla_qkv_forward rotates q_proj's
// (q_proj becomes attention's q without a copy), or with `backward` by the transpose (dq becomes dq_proj). The MLA
// block runs the one-launch functions below; this and the k/v-only modes above are what the tests compare them
// with, and their kernels are the one-launch launchers' fallback for the shapes those do not take.
void mla_q_rope_in_place(const Tensor& q, const Tensor& inv_freq, const Tensor& positions, const MlaQkvLayout& layout,
                         bool backward);

// Where Wqk is nope + rope: q [T, heads, Wqk] (q_proj's output) rotated in place and k, v built from kv and
// k_rope, in one launch: what mla_q_rope_in_place then mla_qkv_forward with q undefined give.
void mla_qkv_forward_in_place(const Tensor& q, const Tensor& kv, const ColumnBlock& k_rope, const Tensor& inv_freq,
                              const Tensor& positions, const MlaQkvLayout& layout, const Tensor& k, const Tensor& v);

// v undefined (where mla_v_read_in_place): k only; attention reads v in kv's columns [nope, nope + v_dim).

// Its transpose: dq [T, heads, nope + rope] rotated back in place (it becomes dq_proj), dkv and dk_rope
// (overwritten): what mla_q_rope_in_place(backward) then mla_qkv_backward with dq undefined give.
void mla_qkv_backward_in_place(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& inv_freq,
                               const Tensor& positions, const MlaQkvLayout& layout, const Tensor& dkv,
                               const ColumnBlock& dk_rope);
// dv undefined (where mla_v_read_in_place): dkv's v columns are left as they are (attention wrote dv there).

// Whether the one-launch kernels can leave v to attention for this shape (q/k heads qk_width wide, v's head width
// v_dim, k_rope's rows k_rope_stride apart): v read in kv's columns, dv written in dkv's. Needs 16-byte columns
// (nope, rope, v_dim, qk_width and k_rope_stride multiples of 8), qk_width == nope + rope, and the heads' rope
// columns within the kernels' shared memory (ops/mla_v_in_place.h).
bool mla_v_read_in_place(const MlaQkvLayout& layout, int64_t heads, int64_t qk_width, int64_t k_rope_stride);

// dst [..., Wd] = src [..., Ws]'s first min(Ws, Wd) columns, zero past them (BF16; the leading dims agree):
// attention's padded output narrowed for o_proj, and o_proj's input gradient padded back.
void copy_leading_columns(const Tensor& src, const Tensor& dst);

}  // namespace moetune::ops::cuda
