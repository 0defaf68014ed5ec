// Attention prep on the GPU for Qwen3/Llama-style attention: the fused QKV projection is split into q, k and v,
// q and k get their per-head RMSNorm (Qwen3's q_norm / k_norm, when given) and then rotate-half RoPE (ops/rope.h:
// pairs (i, i + d/2), angle = position · inv_freq[i] in fp32). BF16 storage, fp32 math.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// qkv BF16 [T, (nq + 2·nkv)·d] (q heads, then k heads, then v heads, each d wide) -> q BF16 [T, nq, d],
// k and v BF16 [T, nkv, d]. q_norm / k_norm: BF16 [d] or undefined (no norm). inv_freq: F32 [d/2], or undefined
// for no RoPE at all (Nemotron-H: q and k are only split off and normed); positions: I32 [T] (unread without
// inv_freq). All on the GPU; nq, nkv and d are read from q's and k's shapes. rotated_scale multiplies the cos and sin
// of the pairs that rotate (nonzero frequency; ops::apply_rope's `scaling`), not the zero-frequency ones. The norms
// scale by norm_weight_offset + weight (Gemma's 1; 0 elsewhere). gate_heads: gated attention's qkv holds that many
// heads' worth of gate logits between q's columns and k's, [q | gate | k | v]; they are skipped.
void qkv_norm_rope_forward(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, double eps,
                           const Tensor& inv_freq, const Tensor& positions, const Tensor& q, const Tensor& k,
                           const Tensor& v, double rotated_scale = 1.0, float norm_weight_offset = 0.0f,
                           int64_t gate_heads = 0);

// Given dq, dk, dv (shaped like q, k, v) and the forward input qkv: writes dqkv (shaped like qkv) and adds the
// norm weights' gradients into dq_norm / dk_norm (BF16 or F32 [d]) when those are defined; a defined dq_norm needs
// a defined q_norm (likewise for k). The gradients are summed in a fixed order (deterministic). With gate_heads,
// dqkv's gate columns are left as they are (the gate's backward writes them).
void qkv_norm_rope_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& qkv,
                            const Tensor& q_norm, const Tensor& k_norm, double eps, const Tensor& inv_freq,
                            const Tensor& positions, const Tensor& dqkv, const Tensor& dq_norm, const Tensor& dk_norm,
                            double rotated_scale = 1.0, float norm_weight_offset = 0.0f, int64_t gate_heads = 0);

}  // namespace moetune::ops::cuda
