// Launchers of the kernels that turn MLA's projections into flash attention's q, k and v and back (ops/cuda/
// mla_qkv.h wraps them for Tensors): raw pointers in, a CUDA status out, free of the engine's host headers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

struct MlaQkvShape {
  int64_t tokens = 0;
  int heads = 0, nope = 0, rope = 0, v_dim = 0;  // rope even
  int qk_width = 0, v_width = 0;                 // the attention tensors' head widths (≥ nope + rope, ≥ v_dim)
  bool interleaved = false;
  float scale = 1.0f;                            // YaRN's attention factor on cos and sin
  int64_t k_rope_stride = 0;                     // k_rope's (dk_rope's) row stride: rope when packed
};

// All BF16 but inv_freq (F32 [rope / 2]) and positions (I32 [T]).
// q_proj [T, heads, nope + rope], kv [T, heads, nope + v_dim], k_rope [T, rope]
//   -> q, k [T, heads, qk_width], v [T, heads, v_width] (zero past the real columns). q null: q_proj is not read
//   (rotated in place by launch_mla_q_rope_in_place instead).
cudaError_t launch_mla_qkv_forward(const void* q_proj, const void* kv, const void* k_rope, const float* inv_freq,
                                   const int32_t* positions, void* q, void* k, void* v, MlaQkvShape shape,
                                   cudaStream_t stream);

// The transpose: dq, dk [T, heads, qk_width], dv [T, heads, v_width] -> dq_proj [T, heads, nope + rope],
// dkv [T, heads, nope + v_dim], dk_rope [T, rope] (every head's rope-key gradient, summed). dq and dq_proj null:
// dq is turned into dq_proj in place by launch_mla_q_rope_in_place instead.
cudaError_t launch_mla_qkv_backward(const void* dq, const void* dk, const void* dv, const float* inv_freq,
                                    const int32_t* positions, void* dq_proj, void* dkv, void* dk_rope, MlaQkvShape shape,
                                    cudaStream_t stream);

// q [T, heads, nope + rope] in place: each head's rope columns rotated as the forward pass rotates q_proj's, or
// (backward) by the transpose, dq into dq_proj. qk_width is ignored.
cudaError_t launch_mla_q_rope_in_place(void* q, const float* inv_freq, const int32_t* positions, MlaQkvShape shape,
                                       bool backward, cudaStream_t stream);

// Where q's head width is q_proj's (qk_width == nope + rope): q [T, heads, qk_width] rotated in place and k, v
// built as launch_mla_qkv_forward builds them, in one launch (mla_qkv_in_place.cu); the separate kernels serve
// shapes it does not take (widths not multiples of 8, unaligned tensors, too many heads for its shared memory).
cudaError_t launch_mla_qkv_forward_in_place(void* q, const void* kv, const void* k_rope, const float* inv_freq,
                                            const int32_t* positions, void* k, void* v, MlaQkvShape shape,
                                            cudaStream_t stream);

// v null: v is not built (attention reads it in kv's columns; the one-launch path only: cudaErrorInvalidValue
// where the shape takes the separate kernels; ops/mla_v_in_place.h says which shapes the callers leave it out for).

// Its transpose: dq rotated back in place (it becomes dq_proj), dkv and dk_rope as launch_mla_qkv_backward gives them.
// dv null: dkv's v columns are not written (attention wrote its dv there); as v null above.
cudaError_t launch_mla_qkv_backward_in_place(void* dq, const void* dk, const void* dv, const float* inv_freq,
                                             const int32_t* positions, void* dkv, void* dk_rope, MlaQkvShape shape,
                                             cudaStream_t stream);

// dst [rows, dst_width] = the first min(src_width, dst_width) columns of src [rows, src_width], zero past them.
cudaError_t launch_copy_leading_columns(const void* src, int64_t src_width, void* dst, int64_t dst_width, int64_t rows,
                                        cudaStream_t stream);

}  // namespace moetune::ops::cuda
