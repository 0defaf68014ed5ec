// cuBLASLt's heuristic ranks several algorithms for a GEMM; ops/cuda/gemm.h's matmul runs its first. These
// expose the rest: a timing test measures them side by side (tests/gpu/test_lm_head_timing.cpp), and a caller
// whose shape measured faster with another one (the LM head's d(weight)) runs that one. Kept out of gemm.h so that
// its many users do not depend on it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

struct GemmCandidate {
  std::string description;  // cuBLASLt's configuration of the algorithm (ids of cublasLt.h's enums), in words
};

// The heuristic's first `limit` algorithms for matmul(a, transpose_a, b, transpose_b, d), best first (fewer when
// it offers fewer; none when M, N or K is 0). The pointers' alignments are part of the problem, as in matmul.
std::vector<GemmCandidate> matmul_candidates(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                                             const Tensor& d, int limit = 16);

// Tile shapes of cuBLASLt's algorithms (values of cublasLt.h's cublasLtMatmulTile_t).
enum class GemmTile : uint32_t {
  k128x160 = 29,
};

// matmul (same semantics and arguments) with the heuristic's highest-ranked algorithm of this tile shape among its
// first 16, or its first when none has it. Cached per problem like matmul's plans.
void matmul_with_tile(GemmTile tile, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                      const Tensor& d, float alpha = 1.0f, float beta = 0.0f);

// matmul (same semantics and arguments) with the heuristic's algorithm number `candidate` (0 is matmul's own),
// its K split into `split_k` parts when split_k > 0 (partial sums reduced in a fixed order in the workspace);
// fails when the heuristic offers fewer candidates or the algorithm cannot split K so. Cached per problem,
// candidate and split like matmul's plans.
void matmul_candidate(int candidate, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                      const Tensor& d, float alpha = 1.0f, float beta = 0.0f, int split_k = 0);

}  // namespace moetune::ops::cuda
