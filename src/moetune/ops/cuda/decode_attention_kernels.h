// Launchers of the decode attention kernels (ops/cuda/decode_attention.h): raw pointers in, a CUDA status out. Free
// of the engine's host headers so that the .cu file compiles without fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

inline constexpr int64_t kDecodeKeysPerSplit = 128;
inline constexpr int64_t kDecodeMaxHeadDim = 256;
// Multi-head latent attention with kv_b absorbed (ops/cuda/decode_attention.h's decode_latent_attention_forward):
// keys of the latent width plus the rope key's (DeepSeek-V3: 512 + 64).
inline constexpr int64_t kDecodeMaxLatentDim = 576;

struct DecodeAttentionShape {
  int64_t queries = 0;   // n new tokens, the last n of the keys: new token i sits at key P + i, P = L - n
  int64_t keys = 0;      // L = P + n
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t v_head_dim = 0;  // v's and out's head width; q's and k's is head_dim (MLA: 128 against 192)
  int64_t v_row_stride = 0;  // elements from value row (key j, kv head g) to the next: v_head_dim, or head_dim
                             // when the values are the first v_head_dim columns of the key rows (latent MLA)
  // 0: none. Else new token i at position p = P + i sees keys [max(0, p - window + 1), p] (the CPU's
  // ops/attention.h and transformers' sliding mask: itself and the window - 1 keys before it).
  int64_t window = 0;
  // The key chunks of kDecodeKeysPerSplit that any new token sees are [first_split, first_split + splits), each
  // reduced by one block; chunks wholly before every token's window are not launched.
  int64_t first_split = 0, splits = 0;
};

// The first key new token `query` sees (the kernels' and the launcher's one rule), and the chunks any of the new
// tokens sees (first_split, splits).
__host__ __device__ inline int64_t decode_first_visible_key(const DecodeAttentionShape& s, int64_t query) {
  const int64_t position = s.keys - s.queries + query;
  return s.window > 0 && position - s.window + 1 > 0 ? position - s.window + 1 : 0;
}
inline void set_decode_splits(DecodeAttentionShape& s) {
  s.first_split = decode_first_visible_key(s, 0) / kDecodeKeysPerSplit;  // new token 0 sees the earliest keys
  s.splits = (s.keys + kDecodeKeysPerSplit - 1) / kDecodeKeysPerSplit - s.first_split;
}

// q BF16 [n, heads, d]; k BF16 [L, kv_heads, d]; v BF16 [L, kv_heads, dv]; out BF16 [n, heads, dv]. partial_out
// F32 [n, heads, splits, dv] and partial_stats F32 [n, heads, splits, 2] (running max, sum of exponentials) are the
// split-K scratch. sinks: null, or [heads] logits (bf16 when sinks_bf16, else f32) that join each head's softmax
// denominator.
cudaError_t launch_decode_attention(const void* q, const void* k, const void* v, void* out, float* partial_out,
                                    float* partial_stats, const void* sinks, bool sinks_bf16,
                                    const DecodeAttentionShape& shape, float scale, cudaStream_t stream);

}  // namespace moetune::ops::cuda
