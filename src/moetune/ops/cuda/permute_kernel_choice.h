// The row-sum launcher of permute_kernels.h with the kernel named instead of picked: for the GPU
// tests that check the two kernel shapes give the same bits and time them against each other
// (tests/gpu/test_row_kernels_gpu.cpp). The engine calls the plain launcher, which takes the faster shape.
#pragma once

#include "moetune/ops/cuda/permute_kernels.h"

namespace moetune::ops::cuda {

// hoisted false: the loop over the choices reads each choice's row and weight per column (the kernel before
// session 10, and the one for top_k > 8 or unaligned rows); true: they are read once per token and the rows'
// loads of a column are all issued before the sums.
cudaError_t launch_gather_sum_rows_with(bool hoisted, RowType type, const void* rows, const int32_t* row_of,
                                        const float* weights, const void* residual, int64_t tokens, int top_k,
                                        int64_t hidden, int64_t kept_rows, void* out, cudaStream_t stream);

}  // namespace moetune::ops::cuda
