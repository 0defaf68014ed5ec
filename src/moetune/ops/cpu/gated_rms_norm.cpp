#include <cmath>

#include "moetune/core/error.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void check_gated(const Tensor& x, const Tensor& z, const Tensor& weight, int64_t group_size) {
  MOETUNE_CHECK(x.dim() == 2 && x.shape() == z.shape() && weight.numel() == x.size(1),
                "gated rms norm: x {}, gate {} and weight {} disagree", x.str(), z.str(), weight.str());
  MOETUNE_CHECK(group_size > 0 && x.size(1) % group_size == 0,
                "gated rms norm: {} columns do not split into groups of {} (n_groups must divide the mamba width)",
                x.size(1), group_size);
}

// One group of one row: gated = x ⊙ silu(z) into `gated`, returns 1 / sqrt(mean(gated²) + eps).
float gate_group(const float* x, const float* z, int64_t count, double eps, float* gated) {
  double squares = 0;
  for (int64_t i = 0; i < count; ++i) {
    gated[i] = x[i] * z[i] * sigmoid(z[i]);
    squares += double(gated[i]) * gated[i];
  }
  return float(1.0 / std::sqrt(squares / double(count) + eps));
}

}  // namespace

Tensor gated_rms_norm_forward(const Tensor& x, const Tensor& z, const Tensor& weight, int64_t group_size, double eps) {
  check_gated(x, z, weight, group_size);
  Tensor out = Tensor::empty(x.shape(), DType::F32);
  const int64_t width = x.size(1);
  for (int64_t start = 0; start < x.numel(); start += group_size) {
    float* o = out.data<float>() + start;
    const float inv = gate_group(x.data<float>() + start, z.data<float>() + start, group_size, eps, o);
    const float* w = weight.data<float>() + start % width;
    for (int64_t i = 0; i < group_size; ++i) o[i] = w[i] * (o[i] * inv);
  }
  return out;
}

GatedRmsNormGrads gated_rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& weight,
                                          int64_t group_size, double eps, const Tensor& dweight) {
  check_gated(x, z, weight, group_size);
  GatedRmsNormGrads grads{Tensor::empty(x.shape(), DType::F32), Tensor::empty(x.shape(), DType::F32)};
  const int64_t width = x.size(1);
  std::vector<float> gated(static_cast<size_t>(group_size));
  for (int64_t start = 0; start < x.numel(); start += group_size) {
    const float *xs = x.data<float>() + start, *zs = z.data<float>() + start, *d = dy.data<float>() + start;
    const float* w = weight.data<float>() + start % width;
    const float inv = gate_group(xs, zs, group_size, eps, gated.data());
    // With n = gated · inv: d(gated) = inv · (d n − n · mean(d n ⊙ n)).
    double dot = 0;
    for (int64_t i = 0; i < group_size; ++i) dot += double(d[i]) * w[i] * gated[size_t(i)] * inv;
    const float mean = float(dot / double(group_size));
    for (int64_t i = 0; i < group_size; ++i) {
      const float normed = gated[size_t(i)] * inv;
      if (dweight.defined()) dweight.data<float>()[start % width + i] += d[i] * normed;
      const float dgated = inv * (d[i] * w[i] - normed * mean);
      const float s = sigmoid(zs[i]);
      grads.dx.data<float>()[start + i] = dgated * zs[i] * s;
      grads.dz.data<float>()[start + i] = dgated * xs[i] * s * (1.0f + zs[i] * (1.0f - s));
    }
  }
  return grads;
}

}  // namespace moetune::ops
