// Launchers of the RMSNorm kernels (BF16 rows, fp32 statistics): raw pointers in, a CUDA status out. Free of
// the engine's host headers so that .cu files compile without fmt; ops/cuda/norm.cpp wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moetune::ops::cuda {

// Row strides, in elements, of x and of the output (y; dx and the residual), for rows read or written in place
// inside wider ones (MLA's kv_a output holds the latent beside the rope key). 0: the width (packed rows). dy is
// always packed.
struct RowStrides {
  int64_t x = 0, out = 0;
};

// y[r] = (weight_offset + weight) ⊙ x[r] / sqrt(mean(x[r]²) + eps) for rows × width BF16 elements (the offset:
// Gemma's 1; 0 elsewhere). y may alias x.
cudaError_t launch_rms_norm_forward(const void* x, const void* weight, void* y, int64_t rows, int64_t width, float eps,
                                    cudaStream_t stream, RowStrides strides = {}, float weight_offset = 0.0f);

// Bytes of fp32 scratch the backward needs for its per-block dweight partials (0 when rows == 0).
size_t rms_norm_backward_workspace_bytes(int64_t rows, int64_t width);

// dx = residual + d(norm)/dx (residual may be null, and dx may alias dy or residual); dweight += Σ_rows dy ⊙ x̂,
// summed in fp32 per block into `workspace` and then added once per element (dweight BF16 or F32).
cudaError_t launch_rms_norm_backward(const void* dy, const void* x, const void* weight, const void* residual, void* dx,
                                     void* dweight, bool dweight_is_bf16, int64_t rows, int64_t width, float eps,
                                     void* workspace, cudaStream_t stream, RowStrides strides = {},
                                     float weight_offset = 0.0f);

}  // namespace moetune::ops::cuda
