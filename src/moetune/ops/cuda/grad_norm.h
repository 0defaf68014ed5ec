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

// Σ over all grads (BF16, CUDA) of g², in fp32, into norm_squared (CUDA F32 [1]). Deterministic: the partial
// sums below, each gradient's slots after the previous one's, then one fixed-order final reduction. An empty
// list gives 0. sparse (or null): a gradient read in its marked rows only, with the same result bits (the others
// would add +0).
// precomputed: partial sums some other kernel already made (CUDA F32, e.g. the experts' weight-gradient epilogue:
// model/cuda/expert_norm_partials.h) for gradients left out of `grads`; they go first in the final reduction.
void grad_norm_squared(const std::vector<Tensor>& grads, const Tensor& norm_squared, const MarkedRows* sparse = nullptr,
                       const std::vector<Tensor>& precomputed = {});

// grad_norm_squared in two parts, for a caller that has some gradients before others (the engine's backward
// pass: train/cuda/overlapped_grad_norm.h). Each gradient owns grad_norm_slots(grad) consecutive floats of a
// partials array; grad_norm_partials fills the slots of some gradients (any subset, in any order, over any
// number of calls and streams: a slot's bits depend on its gradient's elements alone), and once every slot is
// written grad_norm_sum_partials adds them up: with the slots laid out in list order, grad_norm_squared's bits.
int64_t grad_norm_slots(const Tensor& grad);
// Fills slots [first_slots[i], first_slots[i] + grad_norm_slots(grads[i])) of partials (CUDA F32) for each i,
// on the current stream. sparse (or null; its index into grads): read in its marked rows only, the same bits.
void grad_norm_partials(const std::vector<Tensor>& grads, const std::vector<int64_t>& first_slots, const Tensor& partials,
                        const MarkedRows* sparse = nullptr);
// Σ partials in a fixed order into norm_squared (CUDA F32 [1]), on the current stream.
void grad_norm_sum_partials(const Tensor& partials, const Tensor& norm_squared);
// min(1, max_norm / (sqrt(norm_squared) + 1e-6)) into coefficient (CUDA F32 [1]).
void clip_coefficient(const Tensor& norm_squared, double max_norm, const Tensor& coefficient);

}  // namespace moetune::ops::cuda
