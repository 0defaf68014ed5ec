// Global gradient-norm clipping on the GPU without a host round trip (torch.nn.utils.clip_grad_norm_): the sum
// of squares of every gradient lands in a device scalar, the clip coefficient in another, and adamw_step takes
// the coefficient as its grad_scale. train::clip_grad_norm is the CPU reference.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// Σ over all grads (BF16, CUDA) of g², in fp32, into norm_squared (CUDA F32 [1]). Deterministic: per-block
// partials, then one fixed-order final reduction. An empty list gives 0.
void grad_norm_squared(const std::vector<Tensor>& grads, const Tensor& norm_squared);
// min(1, max_norm / (sqrt(norm_squared) + 1e-6)) into coefficient (CUDA F32 [1]).
void clip_coefficient(const Tensor& norm_squared, double max_norm, const Tensor& coefficient);

}  // namespace moetune::ops::cuda
