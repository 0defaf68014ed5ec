// The RMSNorm kernels that load the block's next row while they reduce the current one (ops/cuda/norm_prefetch.cu;
// norm_kernel_choice.h's kNormPrefetchNextRow). For norm.cu's launchers only: the arguments are theirs, the rows
// are rows that fit the rows-in-registers kernels (16-byte aligned, a multiple of 8 elements, at most 2048), and
// the backward writes the per-block dweight partials into `partial` (norm.cu adds their column sums).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

cudaError_t launch_rms_norm_forward_prefetch(const void* x, const void* weight, void* y, int64_t rows, int64_t width,
                                             float eps, cudaStream_t stream);
cudaError_t launch_rms_norm_backward_prefetch(const void* dy, const void* x, const void* weight, const void* residual,
                                              void* dx, float* partial, int64_t blocks, int64_t rows, int64_t width,
                                              float eps, cudaStream_t stream);

}  // namespace moetune::ops::cuda
