// Launcher of the deterministic column reduction that finishes a weight gradient: per-block fp32 partial sums
// [parts, stride] (written by a row kernel) are summed over parts in a fixed order and added once into the
// gradient (BF16 or F32). This is how the norm kernels accumulate dweight without atomics. Raw pointers in, a
// CUDA status out; free of the engine's host headers so that .cu files can include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// out[c] += Σ_p partial[p * stride + c] for c < width. out_is_bf16 picks the output type (else F32).
cudaError_t launch_add_column_sums(const float* partial, int64_t parts, int64_t stride, int64_t width, void* out,
                                   bool out_is_bf16, cudaStream_t stream);

}  // namespace moetune::ops::cuda
