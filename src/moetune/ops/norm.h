// RMSNorm over the last dimension: y = x / sqrt(mean(x²) + eps) · weight, statistics in fp32.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

Tensor rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);

// Given dy: accumulates dweight += Σ_rows dy ⊙ x̂ (unless undefined: frozen) and returns dx. The statistics are recomputed from x, so
// a block keeps only its input for the backward pass.
Tensor rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps, const Tensor& dweight);

}  // namespace moetune::ops
