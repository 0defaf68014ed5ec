#include "moetune/train/grad_clip.h"

#include <algorithm>
#include <cmath>

namespace moetune::train {

double global_grad_norm(const std::vector<Tensor>& gradients) {
  double sum_of_squares = 0;
  for (const Tensor& g : gradients)
    if (g.defined())  // a frozen parameter has none
      for (int64_t i = 0; i < g.numel(); ++i) sum_of_squares += double(g.data<float>()[i]) * g.data<float>()[i];
  return std::sqrt(sum_of_squares);
}

double clip_grad_norm(const std::vector<Tensor>& gradients, double max_norm) {
  const double norm = global_grad_norm(gradients);
  const float scale = float(std::min(1.0, max_norm / (norm + 1e-6)));
  if (scale < 1.0f)
    for (const Tensor& g : gradients)
      if (g.defined())
        for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] *= scale;
  return norm;
}

}  // namespace moetune::train
