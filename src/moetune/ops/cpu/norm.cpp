#include <cmath>

#include "moetune/ops/norm.h"

namespace moetune::ops {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const int64_t width = weight.numel();
  MOETUNE_CHECK(x.numel() % width == 0 && x.size(-1) == width, "rms_norm: x {} with weight {}", x.str(), weight.str());
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float* in = x.data<float>();
  const float* w = weight.data<float>();
  float* out = y.data<float>();
  for (int64_t row = 0; row < x.numel() / width; ++row) {
    const float* xr = in + row * width;
    float sum = 0.0f;
    for (int64_t i = 0; i < width; ++i) sum += xr[i] * xr[i];
    const float rstd = 1.0f / std::sqrt(sum / float(width) + float(eps));
    for (int64_t i = 0; i < width; ++i) out[row * width + i] = w[i] * (xr[i] * rstd);
  }
  return y;
}

}  // namespace moetune::ops
