// Launchers of the elementwise kernels (BF16 or F32, fp32 math): raw pointers in, a CUDA status out. Free of the
// engine's host headers so that .cu files compile without fmt; ops/cuda/elementwise.cpp wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// out = a_scale · a + b_scale · b over n elements (b null: out = a_scale · a), all BF16 (is_bf16) or all F32, the
// products and sum in fp32 (a scale of 1 multiplies by nothing); out may be a or b.
cudaError_t launch_add(const void* a, float a_scale, const void* b, float b_scale, void* out, int64_t n, bool is_bf16,
                       cudaStream_t stream);

}  // namespace moetune::ops::cuda
