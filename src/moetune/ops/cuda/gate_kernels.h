// Launchers of the sigmoid-gate kernels (ops/cuda/gate.h): raw pointers in, a CUDA status out.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// bf16 base/y/out [tokens, width], f32 logits [tokens]; out may be base.
cudaError_t launch_sigmoid_gated_add(const void* base, const void* y, const float* logits, void* out, int64_t tokens,
                                     int64_t width, cudaStream_t stream);
cudaError_t launch_sigmoid_gated_add_backward(const void* dout, const void* y, const float* logits, void* dy,
                                              float* dlogits, int64_t tokens, int64_t width, cudaStream_t stream);

// The elementwise gate, bf16 throughout, [rows, width]: the logits and their gradient read through row strides (ld_*,
// in elements), the rest packed. dy may be dout.
cudaError_t launch_sigmoid_gated(const void* y, const void* logits, int64_t ld_logits, void* out, int64_t rows,
                                 int64_t width, cudaStream_t stream);
cudaError_t launch_sigmoid_gated_backward(const void* dout, const void* y, const void* logits, int64_t ld_logits,
                                          void* dy, void* dlogits, int64_t ld_dlogits, int64_t rows, int64_t width,
                                          cudaStream_t stream);

}  // namespace moetune::ops::cuda
