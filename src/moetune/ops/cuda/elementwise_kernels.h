// Launchers of the elementwise kernels (BF16 or F32, fp32 math): raw pointers in, a CUDA status out. Free of the
// engine's host headers so that .cu files compile without fmt; ops/cuda/elementwise.cpp wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// out = a + b over n elements, all BF16 (is_bf16) or all F32; out may be a or b.
cudaError_t launch_add(const void* a, const void* b, void* out, int64_t n, bool is_bf16, cudaStream_t stream);

}  // namespace moetune::ops::cuda
