#include <cmath>
#include <vector>

#include "moetune/core/error.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float z) { return z * sigmoid(z); }
// d silu(z) / dz = s · (1 + z · (1 − s)) with s = sigmoid(z).
float silu_slope(float z) {
  const float s = sigmoid(z);
  return s * (1.0f + z * (1.0f - s));
}

void check_gated(const Tensor& x, const Tensor& z, const Tensor& weight, int64_t group_size) {
  MOETUNE_CHECK(x.dim() == 2 && x.shape() == z.shape() && weight.numel() == x.size(1),
                "gated rms norm: x {}, gate {} and weight {} disagree", x.str(), z.str(), weight.str());
  MOETUNE_CHECK(group_size > 0 && x.size(1) % group_size == 0,
                "gated rms norm: {} columns do not split into groups of {} (Mamba2's n_groups must divide its width)",
                x.size(1), group_size);
}

// One group of one row: what the norm's statistics are taken over into `input` (x ⊙ silu(z) when the gate comes
// first, x itself when it comes after); returns 1 / sqrt(mean(input²) + eps).
float norm_input(const float* x, const float* z, int64_t count, double eps, GatePlacement placement, float* input) {
  double squares = 0;
  for (int64_t i = 0; i < count; ++i) {
    input[i] = placement == GatePlacement::BeforeNorm ? x[i] * z[i] * sigmoid(z[i]) : x[i];
    squares += double(input[i]) * input[i];
  }
  return float(1.0 / std::sqrt(squares / double(count) + eps));
}

// What multiplies weight ⊙ rms_norm(·): the gate where it follows the norm, 1 where it went before.
float gate_after(float z, GatePlacement placement) { return placement == GatePlacement::AfterNorm ? silu(z) : 1.0f; }

}  // namespace

Tensor gated_rms_norm_forward(const Tensor& x, const Tensor& z, const Tensor& weight, int64_t group_size, double eps,
                              GatePlacement placement) {
  check_gated(x, z, weight, group_size);
  Tensor out = Tensor::empty(x.shape(), DType::F32);
  const int64_t width = x.size(1);
  for (int64_t start = 0; start < x.numel(); start += group_size) {
    float* o = out.data<float>() + start;
    const float* zs = z.data<float>() + start;
    const float inv = norm_input(x.data<float>() + start, zs, group_size, eps, placement, o);
    const float* w = weight.data<float>() + start % width;
    for (int64_t i = 0; i < group_size; ++i) o[i] = w[i] * (o[i] * inv) * gate_after(zs[i], placement);
  }
  return out;
}

GatedRmsNormGrads gated_rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& z, const Tensor& weight,
                                          int64_t group_size, double eps, const Tensor& dweight,
                                          GatePlacement placement) {
  check_gated(x, z, weight, group_size);
  MOETUNE_CHECK(dy.shape() == x.shape(), "gated rms norm backward: dy {} for x {}", dy.str(), x.str());
  GatedRmsNormGrads grads{Tensor::empty(x.shape(), DType::F32), Tensor::empty(x.shape(), DType::F32)};
  const int64_t width = x.size(1);
  std::vector<float> input(static_cast<size_t>(group_size));
  for (int64_t start = 0; start < x.numel(); start += group_size) {
    const float *xs = x.data<float>() + start, *zs = z.data<float>() + start, *d = dy.data<float>() + start;
    const float* w = weight.data<float>() + start % width;
    const float inv = norm_input(xs, zs, group_size, eps, placement, input.data());
    // With n = input · inv and dn = dy ⊙ weight ⊙ gate_after: d(input) = inv · (dn − n · mean(dn ⊙ n)).
    double dot = 0;
    for (int64_t i = 0; i < group_size; ++i)
      dot += double(d[i]) * w[i] * gate_after(zs[i], placement) * input[size_t(i)] * inv;
    const float mean = float(dot / double(group_size));
    for (int64_t i = 0; i < group_size; ++i) {
      const float normed = input[size_t(i)] * inv, after = gate_after(zs[i], placement);
      if (dweight.defined()) dweight.data<float>()[start % width + i] += d[i] * normed * after;
      const float dinput = inv * (d[i] * w[i] * after - normed * mean);
      if (placement == GatePlacement::BeforeNorm) {
        const float s = sigmoid(zs[i]);
        grads.dx.data<float>()[start + i] = dinput * zs[i] * s;
        grads.dz.data<float>()[start + i] = dinput * xs[i] * s * (1.0f + zs[i] * (1.0f - s));
      } else {
        grads.dx.data<float>()[start + i] = dinput;
        grads.dz.data<float>()[start + i] = d[i] * w[i] * normed * silu_slope(zs[i]);
      }
    }
  }
  return grads;
}

}  // namespace moetune::ops
