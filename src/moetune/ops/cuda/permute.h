// Tokens to expert-major order and back on the GPU (the CPU reference is ops/permute.h). Each (token, choice)
// pair becomes one row of the permuted buffer, grouped by expert so each expert's rows are contiguous (what the
// grouped GEMM consumes); combine sums each token's k expert outputs with its routing weights. All tensors live
// on the GPU; every call is queued on gpu::stream() and none waits for it.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

struct DevicePermutation {
  Tensor offsets;  // I32 [E + 1]: expert e owns permuted rows [offsets[e], offsets[e + 1])
  Tensor row_of;   // I32 [T·k]: the permuted row of choice (t, j), index t·k + j
  Tensor source;   // I32 [T·k]: the token that permuted row r holds
  int64_t num_experts = 0, top_k = 0;
  // Expert parallelism plans the choices of the tokens a rank receives with one extra expert, the last, for the
  // choices whose experts live on other ranks, and keeps only the rows before it: the rows at or past
  // kept_rows are not permuted, combined or given gradients. -1: every row is kept.
  int64_t kept_rows = -1;
  int64_t tokens() const { return top_k > 0 ? row_of.numel() / top_k : 0; }
  int64_t rows() const { return kept_rows >= 0 ? kept_rows : row_of.numel(); }
};

// expert_ids I32 [T, k] (the router's output, ids in [0, E)) -> the plan. Stable: within an expert, rows keep
// token order; an expert may get no rows. Ids out of range give a wrong plan (never an out-of-bounds access):
// they are not checked, as that would need the host to wait.
DevicePermutation plan_permutation(const Tensor& expert_ids, int64_t num_experts);

// out[r] = x[source[r]]: x [T, H] -> out [rows(), H], same dtype (a copy, so any dtype).
void permute_tokens(const Tensor& x, const DevicePermutation& plan, const Tensor& out);

// out[j] = x[index[j]]: x [N, H] -> out [M, H] (index I32 [M] on the device, any dtype): expert parallelism's
// rows to send, picked from a rank's tokens.
void gather_rows(const Tensor& x, const Tensor& index, const Tensor& out);

// out[t] = residual[t] + Σ_j rows[index[t, j]] in f32, over the j with index[t, j] < N (the others name no row):
// rows [N, H], index I32 [T, P], out and residual [T, H], all BF16 or all F32; residual optional, may be out.
// Expert parallelism's sum of what each rank sent back for a token.
void sum_rows(const Tensor& rows, const Tensor& index, const Tensor& out, const Tensor& residual = {});

// dx[t] = residual[t] + Σ_j dpermuted[row_of(t, j)], summed in f32. dpermuted [rows(), H], dx and residual [T, H],
// all BF16 or all F32; residual is optional and may be dx itself.
void permute_tokens_backward(const Tensor& dpermuted, const DevicePermutation& plan, const Tensor& dx,
                             const Tensor& residual = {});

// out[t] = residual[t] + Σ_j weights[t, j] · expert_out[row_of(t, j)], in f32. expert_out [rows(), H], out and
// residual [T, H], all BF16 or all F32; weights F32 [T, k]; residual is optional and may be out itself.
void combine_experts(const Tensor& expert_out, const DevicePermutation& plan, const Tensor& weights,
                     const Tensor& out, const Tensor& residual = {});

// dexpert_out[row_of(t, j)] = weights[t, j] · dout[t] and dweights[t, j] = ⟨dout[t], expert_out[row_of(t, j)]⟩
// (f32 sums). dout [T, H], expert_out and dexpert_out [rows(), H] (all BF16 or all F32; dexpert_out apart from the
// inputs), weights and dweights F32 [T, k]. A choice past the kept rows gets dweights 0.
void combine_experts_backward(const Tensor& dout, const Tensor& expert_out, const DevicePermutation& plan,
                              const Tensor& weights, const Tensor& dexpert_out, const Tensor& dweights);

}  // namespace moetune::ops::cuda
