// One GEMM of a timing test, as ops/cuda/gemm_candidates.h's functions take it: d = a(ᵀ) · b(ᵀ) + beta · d.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::testing {

struct GemmProblem {
  const char* name;
  Tensor a;
  bool transpose_a;
  Tensor b;
  bool transpose_b;
  Tensor d;
  float beta;
};

}  // namespace moetune::testing
