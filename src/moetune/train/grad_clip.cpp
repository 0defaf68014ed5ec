#include "moetune/train/grad_clip.h"

#include <algorithm>
#include <cmath>

namespace moetune::train {

double gradient_sum_of_squares(const std::vector<Tensor>& gradients) {
  double sum_of_squares = 0;
  for (const Tensor& g : gradients)
    if (g.defined())  // a frozen parameter has none
      for (int64_t i = 0; i < g.numel(); ++i) sum_of_squares += double(g.data<float>()[i]) * g.data<float>()[i];
  return sum_of_squares;
}

double global_grad_norm(const std::vector<Tensor>& gradients) { return std::sqrt(gradient_sum_of_squares(gradients)); }

void scale_to_max_norm(const std::vector<Tensor>& gradients, double norm, double max_norm) {
  const float scale = float(std::min(1.0, max_norm / (norm + 1e-6)));
  if (scale < 1.0f)
    for (const Tensor& g : gradients)
      if (g.defined())
        for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] *= scale;
}

double clip_grad_norm(const std::vector<Tensor>& gradients, double max_norm) {
  const double norm = global_grad_norm(gradients);
  scale_to_max_norm(gradients, norm, max_norm);
  return norm;
}

}  // namespace moetune::train
