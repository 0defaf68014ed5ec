// MLA's in-place q/k/v assembly and its transpose with one warp per token (mla_qkv_warp.cu), for rope widths of
// 16, 32 or 64 (DeepSeek-V3, Kimi-K2, Moonlight: 64): what launch_mla_qkv_{forward,backward}_in_place
// (mla_qkv_kernels.h) run wherever it takes the shape, with the same arguments and results; the block-per-token
// kernels of mla_qkv_in_place.cu serve the other widths.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>

#include "moetune/ops/cuda/mla_qkv_kernels.h"

namespace moetune::ops::cuda {

// rope 16, 32 or 64, q's head width q_proj's, every width a multiple of 8 and every tensor 16-byte aligned.
bool mla_qkv_warp_takes(const MlaQkvShape& shape, std::initializer_list<const void*> tensors);

cudaError_t launch_mla_qkv_forward_warp(void* q, const void* kv, const void* k_rope, const float* inv_freq,
                                        const int32_t* positions, void* k, void* v, MlaQkvShape shape,
                                        cudaStream_t stream);
cudaError_t launch_mla_qkv_backward_warp(void* dq, const void* dk, const void* dv, const float* inv_freq,
                                         const int32_t* positions, void* dkv, void* dk_rope, MlaQkvShape shape,
                                         cudaStream_t stream);

}  // namespace moetune::ops::cuda
