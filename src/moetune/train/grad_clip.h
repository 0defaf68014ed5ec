// Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_): scales every gradient by
// min(1, max_norm / (‖g‖ + 1e-6)) where ‖g‖ is the 2-norm over all of them.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::train {

double global_grad_norm(const std::vector<Tensor>& gradients);
// Σ g² (sharded gradients: each rank's part, summed over the ranks before the square root).
double gradient_sum_of_squares(const std::vector<Tensor>& gradients);
// Scales by min(1, max_norm / (norm + 1e-6)), `norm` being the norm of every gradient (all ranks').
void scale_to_max_norm(const std::vector<Tensor>& gradients, double norm, double max_norm);
// Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& gradients, double max_norm);

}  // namespace moetune::train
