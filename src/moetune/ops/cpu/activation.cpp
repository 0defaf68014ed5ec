#include <cmath>

#include "moetune/ops/activation.h"

namespace moetune::ops {
namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

Tensor swiglu_forward(const Tensor& gate_up) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  Tensor out = Tensor::empty({rows, inner}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up.data<float>() + r * 2 * inner;
    const float* up = gate + inner;
    float* o = out.data<float>() + r * inner;
    for (int64_t i = 0; i < inner; ++i) o[i] = gate[i] * sigmoid(gate[i]) * up[i];
  }
  return out;
}

Tensor swiglu_backward(const Tensor& dout, const Tensor& gate_up) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  Tensor dgate_up = Tensor::empty(gate_up.shape(), DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up.data<float>() + r * 2 * inner;
    const float* up = gate + inner;
    const float* d = dout.data<float>() + r * inner;
    float* dgate = dgate_up.data<float>() + r * 2 * inner;
    float* dup = dgate + inner;
    for (int64_t i = 0; i < inner; ++i) {
      const float s = sigmoid(gate[i]);
      dup[i] = d[i] * gate[i] * s;
      dgate[i] = d[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));  // d silu = s (1 + g (1 - s))
    }
  }
  return dgate_up;
}

}  // namespace moetune::ops
