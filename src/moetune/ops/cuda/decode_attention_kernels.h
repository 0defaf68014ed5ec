// Launchers of the decode attention kernels (ops/cuda/decode_attention.h): raw pointers in, a CUDA status out. Free
// of the engine's host headers so that the .cu file compiles without fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

struct DecodeAttentionShape {
  int64_t queries = 0;   // n new tokens, the last n of the keys
  int64_t keys = 0;      // L = P + n
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t splits = 0;    // key chunks of kKeysPerSplit, each reduced by one block
};

inline constexpr int64_t kDecodeKeysPerSplit = 128;
inline constexpr int64_t kDecodeMaxHeadDim = 256;

// q BF16 [n, heads, d]; k, v BF16 [L, kv_heads, d]; out BF16 [n, heads, d]. partial_out F32 [n, heads, splits, d]
// and partial_stats F32 [n, heads, splits, 2] (running max, sum of exponentials) are the split-K scratch.
cudaError_t launch_decode_attention(const void* q, const void* k, const void* v, void* out, float* partial_out,
                                    float* partial_stats, const DecodeAttentionShape& shape, float scale,
                                    cudaStream_t stream);

}  // namespace moetune::ops::cuda
