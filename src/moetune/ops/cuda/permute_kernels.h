// Launchers of the token permutation kernels (tokens -> expert-major rows and back): raw device pointers in, a
// CUDA status out. Free of the engine's host headers so that permute.cu compiles without fmt; ops/cuda/permute.cpp
// wraps them for Tensors and owns the workspace.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moetune::ops::cuda {

// Element type of the [rows, hidden] activations the gather kernels read and write (accumulation is f32).
enum class RowType { F32, BF16 };

// Device scratch bytes launch_plan_permutation needs for `choices` = tokens · k choices among `experts`.
cudaError_t permutation_workspace_bytes(int64_t choices, int experts, size_t* bytes);

// expert_ids [choices] i32 (choice i = token i / top_k) -> offsets [experts + 1], row_of [choices] (the permuted
// row of choice i) and source [choices] (the token permuted row r holds), stably: within an expert, rows keep
// choice order. Ids outside [0, experts) give a wrong plan but no out-of-bounds access.
cudaError_t launch_plan_permutation(const int32_t* expert_ids, int64_t choices, int top_k, int experts,
                                    void* workspace, size_t workspace_bytes, int32_t* offsets, int32_t* row_of,
                                    int32_t* source, cudaStream_t stream);

// out[r] = x[source[r]] for r < rows, rows of row_bytes bytes (a copy: any element type).
cudaError_t launch_permute_rows(const void* x, const int32_t* source, int64_t rows, int64_t row_bytes, void* out,
                                cudaStream_t stream);

// out[t] = residual[t] + Σ_j weights[t, j] · rows[row_of[t, j]] in f32, for t < tokens, j < top_k, over the j
// whose row_of[t, j] < kept_rows (the others are choices whose rows live on another rank).
// weights (f32) may be null (all 1: the permutation's backward); residual may be null or equal to out.
cudaError_t launch_gather_sum_rows(RowType type, const void* rows, const int32_t* row_of, const float* weights,
                                   const void* residual, int64_t tokens, int top_k, int64_t hidden, int64_t kept_rows,
                                   void* out, cudaStream_t stream);

// For every choice i = t · top_k + j: dexpert_out[row_of[i]] = weights[i] · dout[t] and
// dweights[i] = ⟨dout[t], expert_out[row_of[i]]⟩ (f32); a choice with row_of[i] >= kept_rows gets dweights[i] = 0
// and writes no row. dexpert_out must not overlap the inputs.
cudaError_t launch_combine_backward(RowType type, const void* dout, const void* expert_out, const int32_t* row_of,
                                    const float* weights, int64_t tokens, int top_k, int64_t hidden, int64_t kept_rows,
                                    void* dexpert_out, float* dweights, cudaStream_t stream);

}  // namespace moetune::ops::cuda
