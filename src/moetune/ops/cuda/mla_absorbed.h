// Decoding with multi-head latent attention's compressed cache (DeepSeek-V2's "absorbed" form): kv_b's k_nope rows
// (W_uk) fold into each head's query and its v rows (W_uv) into the output, so that every head attends over the
// cached rows [rms_norm(c) | rotated k_rope] (ops/cuda/decode_attention.h's decode_latent_attention_forward) rather
// than over expanded per-head keys and values: latent + rope values a token and layer (DeepSeek-V3: 576) instead of
// heads · (q/k + v) (Moonlight: 5,120; Kimi-K2: 20,480).
//   q_abs[h] = [q_nope[h] · W_uk[h] | rope(q_rope[h])], so q_abs[h] · [c | k_rope] = q_nope[h]·(W_uk[h] c) + ... : the
//   expanded path's score; attended[h] = W_uv[h] · Σ_j p_j c_j = Σ_j p_j v_j[h]: its output.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// The widths (DeepSeek-V3's qk_nope_head_dim, qk_rope_head_dim, v_head_dim, kv_lora_rank).
struct MlaAbsorbedWidths {
  int64_t nope = 0, rope = 0, v_dim = 0, latent = 0;
};

// q BF16 [T, heads, Wq] ([q_nope | rotated q_rope | zeros], Wq ≥ nope + rope); kv_b BF16 [heads·(nope + v_dim),
// latent] -> q_abs BF16 [T, heads, latent + rope].
void mla_absorb_q(const Tensor& q, const Tensor& kv_b, const MlaAbsorbedWidths& widths, const Tensor& q_abs);

// o_latent BF16 [T, heads, latent] (attention's output over the cached latents) -> attended BF16 [T, heads, Wv]:
// each head's W_uv · o_latent in its first v_dim columns, zeros past them (Wv ≥ v_dim).
void mla_absorb_out(const Tensor& o_latent, const Tensor& kv_b, const MlaAbsorbedWidths& widths,
                    const Tensor& attended);

}  // namespace moetune::ops::cuda
