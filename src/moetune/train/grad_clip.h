// Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_): scales every gradient by
// min(1, max_norm / (‖g‖ + 1e-6)) where ‖g‖ is the 2-norm over all of them.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::train {

double global_grad_norm(const std::vector<Tensor>& gradients);
// Returns the norm before clipping.
double clip_grad_norm(const std::vector<Tensor>& gradients, double max_norm);

}  // namespace moetune::train
