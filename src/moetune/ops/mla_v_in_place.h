// Whether DeepSeek-V3's latent attention on the GPU reads v where kv_b wrote it: cuDNN takes v as columns
// [nope, nope + v_dim) of each head of kv_b's output [T, heads, nope + v_dim] (and writes dv into the same columns
// of kv_b's output gradient), so that the q/k/v assembly neither copies v out nor dv back. Host arithmetic only,
// shared by the MLA block (model/cuda/mla_attention_block.cpp), its memory plan (model/memory_plan.cpp) and the
// assembly op's checks (ops/cuda/mla_qkv.cpp): the one-launch assembly kernels' conditions
// (ops/cuda/mla_qkv_in_place.cu), whose launchers refuse a missing v on any other shape.
#pragma once

#include <cstdint>

namespace moetune::ops {

// k_rope_stride: the shared rope key's row stride (kv_a's output [T, latent + rope], the key its last columns), whose
// rows the kernels read 16 bytes at a time. Moonlight and DeepSeek-V3 (nope 128, rope 64, v 128, latent 512; 16 /
// 128 heads) qualify.
inline bool mla_v_in_kv(int64_t heads, int64_t nope, int64_t rope, int64_t v_dim, int64_t qk_width,
                        int64_t k_rope_stride) {
  constexpr int64_t kVec = 8;                      // bf16 values a 16-byte access moves (cuDNN's alignment too)
  constexpr int64_t kSharedBytes = 48 * 1024;      // the kernels' shared memory without an opt-in
  const bool columns = nope % kVec == 0 && rope > 0 && rope % kVec == 0 && v_dim > 0 && v_dim % kVec == 0 &&
                       k_rope_stride % kVec == 0;
  // The backward kernel stages 2 · heads rows of rope bf16 columns after rope fp32 angles (the forward fewer).
  const bool shared = rope * 4 + 2 * heads * rope * 2 <= kSharedBytes;
  return columns && qk_width == nope + rope && v_dim <= qk_width && shared;
}

}  // namespace moetune::ops
