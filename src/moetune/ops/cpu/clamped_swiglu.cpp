#include <algorithm>
#include <cmath>

#include "moetune/ops/activation.h"

namespace moetune::ops {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

Tensor clamped_swiglu_forward(const Tensor& gate_up, const SwigluClamp& clamp) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  Tensor out = Tensor::empty({rows, inner}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up.data<float>() + r * 2 * inner;
    const float* up = gate + inner;
    float* o = out.data<float>() + r * inner;
    for (int64_t i = 0; i < inner; ++i) {
      const float g = std::min(gate[i], clamp.limit), u = std::clamp(up[i], -clamp.limit, clamp.limit);
      o[i] = (u + 1.0f) * (g * sigmoid(g * clamp.alpha));
    }
  }
  return out;
}

Tensor clamped_swiglu_backward(const Tensor& dout, const Tensor& gate_up, const SwigluClamp& clamp) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  Tensor dgate_up = Tensor::empty(gate_up.shape(), DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up.data<float>() + r * 2 * inner;
    const float* up = gate + inner;
    const float* d = dout.data<float>() + r * inner;
    float* dgate = dgate_up.data<float>() + r * 2 * inner;
    float* dup = dgate + inner;
    for (int64_t i = 0; i < inner; ++i) {
      const float g = std::min(gate[i], clamp.limit), u = std::clamp(up[i], -clamp.limit, clamp.limit);
      const float s = sigmoid(g * clamp.alpha);
      dup[i] = up[i] >= -clamp.limit && up[i] <= clamp.limit ? d[i] * g * s : 0.0f;
      // d/dg [g σ(αg)] = σ + α g σ (1 - σ)
      dgate[i] = gate[i] <= clamp.limit ? d[i] * (u + 1.0f) * (s + clamp.alpha * g * s * (1.0f - s)) : 0.0f;
    }
  }
  return dgate_up;
}

}  // namespace moetune::ops
