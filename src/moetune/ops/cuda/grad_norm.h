// Global gradient-norm clipping on the GPU without a host round trip (torch.nn.utils.clip_grad_norm_): the sum
// of squares of every gradient lands in a device scalar, the clip coefficient in another, and adamw_step takes
// the coefficient as its grad_scale. train::clip_grad_norm is the CPU reference.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// A gradient that is +0 outside some rows (the lazily updated embedding's: ops/cuda/adamw_rows.h): grads[index]
// is [rows, row_length], `marked` (CUDA I32 [rows]) nonzero for the rows that may hold anything else.
struct MarkedRows {
  size_t index;
  Tensor marked;
};

// Σ over all grads (BF16, CUDA) of g², in fp32, into norm_squared (CUDA F32 [1]). Deterministic: per-block
// partials, then one fixed-order final reduction. An empty list gives 0. sparse (or null): a gradient read in its
// marked rows only, with the same result bits (the others would add +0).
void grad_norm_squared(const std::vector<Tensor>& grads, const Tensor& norm_squared, const MarkedRows* sparse = nullptr);
// min(1, max_norm / (sqrt(norm_squared) + 1e-6)) into coefficient (CUDA F32 [1]).
void clip_coefficient(const Tensor& norm_squared, double max_norm, const Tensor& coefficient);

}  // namespace moetune::ops::cuda
