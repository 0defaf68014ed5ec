// RMSNorm over the last dimension: y = x / sqrt(mean(x²) + eps) · (weight_offset + weight), statistics in fp32.
// weight_offset is 0 but for Gemma, whose norms scale by 1 + weight (its weights start at zero).
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

Tensor rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, float weight_offset = 0.0f);

// Given dy: accumulates dweight += Σ_rows dy ⊙ x̂ (unless undefined: frozen) and returns dx. The statistics are recomputed from x, so
// a block keeps only its input for the backward pass.
Tensor rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps, const Tensor& dweight,
                         float weight_offset = 0.0f);

}  // namespace moetune::ops
