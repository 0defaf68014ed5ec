// Launchers of the one-token expert kernels (ops/cuda/expert_gemv.h): raw pointers in, a CUDA status out. Free of
// the engine's host headers so that the .cu file compiles without fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// activated[s, j] for s < top_k, j < inner: gated, silu(W[e_s, j] · x) · (W[e_s, inner + j] · x) with W BF16
// [E, 2·inner, hidden]; else relu(W[e_s, j] · x)² with W [E, inner, hidden]. x BF16 [hidden], expert_ids I32 [top_k].
cudaError_t launch_expert_up_activation(const void* x, const void* up, const int32_t* expert_ids, void* activated,
                                        int64_t top_k, int64_t inner, int64_t hidden, bool gated, cudaStream_t stream);

// out[c] = residual[c] + Σ_s weights[s] · (D[e_s, c] · activated[s]) for c < hidden; down D BF16 [E, hidden, inner].
cudaError_t launch_expert_down_combine(const void* activated, const void* down, const int32_t* expert_ids,
                                       const float* weights, const void* residual, void* out, int64_t top_k,
                                       int64_t inner, int64_t hidden, cudaStream_t stream);

}  // namespace moetune::ops::cuda
