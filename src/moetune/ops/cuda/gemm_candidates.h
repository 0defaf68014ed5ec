// cuBLASLt's heuristic ranks several algorithms for a GEMM; ops/cuda/gemm.h's matmul runs its first. These
// expose the rest: a timing test measures them side by side (tests/gpu/test_lm_head_timing.cpp), and
// matmul_tuned runs the fastest of them (the LM head's GEMMs). Kept out of gemm.h so that
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

// matmul (same semantics and arguments) with the fastest of the heuristic's first 8 algorithms for the problem,
// timed on the first call whose beta is 0 (in place: D is about to be written anyway, so the timing needs no
// scratch memory; the host waits for it, once per problem and process). The heuristic's first stays unless another
// is at least 2% faster; a problem first met with beta ≠ 0 keeps it for the life of the process, so every call
// of one problem runs one algorithm; past 64 timed problems a process, new ones run the heuristic's first (a
// guard against callers whose shapes change every step: call it for shapes that repeat). For large GEMMs whose
// best algorithm the heuristic misses by shape: at 2048 rows the LM head's three GEMMs ran 5-9% faster on other
// candidates at Moonlight's vocabulary and 2-4% at Qwen3's, on different tiles for each
// (tests/gpu/test_lm_head_timing.cpp, docs/benchmarks.md).
void matmul_tuned(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& d,
                  float alpha = 1.0f, float beta = 0.0f);

// Off: matmul_tuned runs what matmul runs (the same algorithm in every process). On by default; for problems
// not yet met.
void set_gemm_tuning(bool on);

// matmul (same semantics and arguments) with the heuristic's algorithm number `candidate` (0 is matmul's own),
// its K split into `split_k` parts when split_k > 0 (partial sums reduced in a fixed order in the workspace);
// fails when the heuristic offers fewer candidates or the algorithm cannot split K so. Cached per problem,
// candidate and split like matmul's plans.
void matmul_candidate(int candidate, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                      const Tensor& d, float alpha = 1.0f, float beta = 0.0f, int split_k = 0);

}  // namespace moetune::ops::cuda
