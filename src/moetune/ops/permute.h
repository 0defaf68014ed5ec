// Tokens to expert-major order and back. Each (token, choice) pair becomes one row of the permuted buffer,
// grouped by expert so each expert's rows are contiguous (what a grouped GEMM consumes); the combine step
// sums each token's k expert outputs with its routing weights.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/router.h"

namespace moetune::ops {

struct ExpertPermutation {
  std::vector<int64_t> offsets;    // [E + 1]: expert e owns permuted rows [offsets[e], offsets[e + 1])
  std::vector<int64_t> source;     // [T * k]: the token that permuted row r holds
  std::vector<int64_t> row_of;     // [T * k]: the permuted row of choice (t, j), index t * k + j
};

// Stable: within an expert, rows keep token order. An expert may get no rows.
ExpertPermutation plan_permutation(const Routing& routing, int64_t num_experts);

Tensor permute_tokens(const Tensor& x, const ExpertPermutation& plan);                  // [T, H] -> [T*k, H]
Tensor permute_tokens_backward(const Tensor& dpermuted, const ExpertPermutation& plan,  // scatter-add back
                               int64_t tokens);

// out[t] = Σ_j weight[t, j] · expert_out[row_of(t, j)]  ([T*k, H] -> [T, H]).
Tensor combine_experts(const Tensor& expert_out, const ExpertPermutation& plan, const Routing& routing);

struct CombineGrads {
  Tensor dexpert_out;          // [T*k, H]
  std::vector<float> dweight;  // [T*k]
};
CombineGrads combine_experts_backward(const Tensor& dout, const Tensor& expert_out, const ExpertPermutation& plan,
                                      const Routing& routing);

}  // namespace moetune::ops
