// Launchers of Mamba2's recurrent step (generation with a state cache): raw pointers in, a CUDA status out. Free of
// the engine's host headers so that the .cu file compiles without fmt; ops/cuda/mamba2_step.cpp wraps them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moetune/ops/cuda/mamba2_conv_kernels.h"
#include "moetune/ops/cuda/mamba2_scan_kernels.h"

namespace moetune::ops::cuda {

// The conv over n new rows (one sequence, no restarts) continuing from `window` (BF16 [K−1, C]: the K−1 rows of
// xbc before them, oldest first, zeros before the sequence's start), which then holds the last K−1 rows. The
// same fp32 sum, in the same order, as launch_mamba2_conv_forward.
cudaError_t launch_mamba2_conv_step(int64_t rows, int64_t channels, int64_t kernel, StridedBf16 xbc, const void* weight,
                                    const void* bias, void* window, StridedBf16 out, cudaStream_t stream);

// The scan's recurrence over n new rows continuing from `state` (F32 [H, P, S]), which then holds the state after
// the last: state = exp(dt·A)·state + dt·B⊗x, y = state·C + D·x, one warp per (head, p) walking the rows in order.
// dims.rows is n; dims.chunk is not read.
cudaError_t launch_mamba2_scan_step(const Mamba2ScanDims& dims, const Mamba2ScanPointers& in, float* state,
                                    StridedBf16 y, cudaStream_t stream);

}  // namespace moetune::ops::cuda
