// Launchers of the attention-sink kernels (attention_sinks.h): raw pointers in, a CUDA status out; free of the
// engine's host headers so that the .cu compiles without fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// out [T, heads, d] bf16, stats [T, heads] f32, sinks [heads] (bf16 when sinks_bf16, else f32).
cudaError_t launch_attention_sinks_forward(const void* sinks, bool sinks_bf16, void* out, float* stats, int64_t tokens,
                                           int heads, int head_dim, cudaStream_t stream);

// dsinks[h] += −Σ_t exp(sinks[h] − stats[t, h]) · Σ_i dout[t, h, i] · out[t, h, i].
cudaError_t launch_attention_sinks_backward(const void* sinks, bool sinks_bf16, const void* dout, const void* out,
                                            const float* stats, int64_t tokens, int heads, int head_dim, void* dsinks,
                                            bool dsinks_bf16, cudaStream_t stream);

}  // namespace moetune::ops::cuda
