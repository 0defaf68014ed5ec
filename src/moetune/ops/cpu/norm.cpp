#include <cmath>

#include "moetune/ops/norm.h"

namespace moetune::ops {

namespace {

float inverse_rms(const float* row, int64_t width, double eps) {
  float sum = 0.0f;
  for (int64_t i = 0; i < width; ++i) sum += row[i] * row[i];
  return 1.0f / std::sqrt(sum / float(width) + float(eps));
}

int64_t checked_width(const Tensor& x, const Tensor& weight) {
  const int64_t width = weight.numel();
  MOETUNE_CHECK(x.dim() >= 1 && x.size(-1) == width, "rms_norm: x {} with weight {}", x.str(), weight.str());
  return width;
}

}  // namespace

Tensor rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, float weight_offset) {
  const int64_t width = checked_width(x, weight);
  Tensor y = Tensor::empty(x.shape(), DType::F32);
  const float* w = weight.data<float>();
  for (int64_t row = 0; row < x.numel() / width; ++row) {
    const float* xr = x.data<float>() + row * width;
    float* yr = y.data<float>() + row * width;
    const float rstd = inverse_rms(xr, width, eps);
    for (int64_t i = 0; i < width; ++i) yr[i] = (weight_offset + w[i]) * (xr[i] * rstd);
  }
  return y;
}

Tensor rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps, const Tensor& dweight,
                         float weight_offset) {
  const int64_t width = checked_width(x, weight);
  MOETUNE_CHECK(dy.numel() == x.numel(), "rms_norm_backward: dy {} for x {}", dy.str(), x.str());
  Tensor dx = Tensor::empty(x.shape(), DType::F32);
  const float* w = weight.data<float>();
  float* dw = dweight.defined() ? dweight.data<float>() : nullptr;  // null: a frozen weight
  for (int64_t row = 0; row < x.numel() / width; ++row) {
    const float* xr = x.data<float>() + row * width;
    const float* dyr = dy.data<float>() + row * width;
    float* dxr = dx.data<float>() + row * width;
    const float rstd = inverse_rms(xr, width, eps);
    // y = g ⊙ x·r with g = offset + w, r = (mean x² + eps)^-1/2:  dx = r·(g⊙dy) - x·r³·⟨g⊙dy, x⟩ / width.
    float projection = 0.0f;
    for (int64_t i = 0; i < width; ++i) projection += (weight_offset + w[i]) * dyr[i] * xr[i];
    const float correction = rstd * rstd * rstd * projection / float(width);
    for (int64_t i = 0; i < width; ++i) {
      dxr[i] = rstd * (weight_offset + w[i]) * dyr[i] - xr[i] * correction;
      if (dw) dw[i] += dyr[i] * xr[i] * rstd;
    }
  }
  return dx;
}

}  // namespace moetune::ops
