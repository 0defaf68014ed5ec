// The RMSNorm launchers with the kernel named instead of picked: for the GPU tests that check the kernel shapes
// give the same bits and time them against each other (tests/gpu/test_row_kernels_gpu.cpp). The engine calls
// the plain launchers of norm_kernels.h, which pick.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moetune/ops/cuda/norm_kernels.h"

namespace moetune::ops::cuda {

// rows_in_registers 0: the one-row-per-pass kernels (any width, any alignment). 1, 2, 4 or 8 (forward), 1, 2 or 4
// (backward): the rows-in-registers kernels holding that many rows at once, for 16-byte-aligned rows (the workspace too) of at most 2048 elements,
// a multiple of 8 (else cudaErrorInvalidValue). The arguments are the plain launchers'.
cudaError_t launch_rms_norm_forward_with(int rows_in_registers, const void* x, const void* weight, void* y,
                                         int64_t rows, int64_t width, float eps, cudaStream_t stream,
                                         RowStrides strides = {}, float weight_offset = 0.0f);
cudaError_t launch_rms_norm_backward_with(int rows_in_registers, const void* dy, const void* x, const void* weight,
                                          const void* residual, void* dx, void* dweight, bool dweight_is_bf16,
                                          int64_t rows, int64_t width, float eps, void* workspace, cudaStream_t stream,
                                          RowStrides strides = {}, float weight_offset = 0.0f);

}  // namespace moetune::ops::cuda
