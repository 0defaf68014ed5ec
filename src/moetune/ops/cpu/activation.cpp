#include <algorithm>
#include <cmath>

#include "moetune/ops/activation.h"

namespace moetune::ops {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// out[r, i] = f(gate[r, i], up[r, i]) over a fused [gate | up] input [T, 2I].
template <typename F>
Tensor map_gate_up(const Tensor& gate_up, F f) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  Tensor out = Tensor::empty({rows, inner}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up.data<float>() + r * 2 * inner;
    const float* up = gate + inner;
    float* o = out.data<float>() + r * inner;
    for (int64_t i = 0; i < inner; ++i) o[i] = f(gate[i], up[i]);
  }
  return out;
}

// d(gate_up) [T, 2I] from d(out) [T, I]: f(gate, up, d, dgate, dup) writes one element's two gradients.
template <typename F>
Tensor map_gate_up_backward(const Tensor& dout, const Tensor& gate_up, F f) {
  const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
  Tensor dgate_up = Tensor::empty(gate_up.shape(), DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up.data<float>() + r * 2 * inner;
    const float* up = gate + inner;
    const float* d = dout.data<float>() + r * inner;
    float* dgate = dgate_up.data<float>() + r * 2 * inner;
    float* dup = dgate + inner;
    for (int64_t i = 0; i < inner; ++i) f(gate[i], up[i], d[i], dgate[i], dup[i]);
  }
  return dgate_up;
}

}  // namespace

Tensor swiglu_forward(const Tensor& gate_up) { return gated_forward(gate_up, GateFunction::Silu); }

Tensor swiglu_backward(const Tensor& dout, const Tensor& gate_up) {
  return gated_backward(dout, gate_up, GateFunction::Silu);
}

std::optional<GateFunction> gate_function_for_hidden_act(std::string_view hidden_act) {
  if (hidden_act == "silu" || hidden_act == "swish") return GateFunction::Silu;
  if (hidden_act == "gelu") return GateFunction::Gelu;
  if (hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh" || hidden_act == "gelu_fast")
    return GateFunction::GeluTanh;
  if (hidden_act == "quick_gelu") return GateFunction::QuickGelu;
  if (hidden_act == "relu") return GateFunction::Relu;
  return std::nullopt;
}

const char* gate_function_name(GateFunction gate) {
  switch (gate) {
    case GateFunction::Silu:
      return "silu";
    case GateFunction::Gelu:
      return "gelu";
    case GateFunction::GeluTanh:
      return "gelu_pytorch_tanh";
    case GateFunction::QuickGelu:
      return "quick_gelu";
    case GateFunction::Relu:
      return "relu";
  }
  return "?";
}

namespace {

// f(g) and f'(g) for each gate function.
struct GateValue {
  float f, df;
};
GateValue gate_value(GateFunction gate, float g) {
  switch (gate) {
    case GateFunction::Gelu: {
      constexpr float kInvSqrt2 = 0.70710678118654752f, kInvSqrt2Pi = 0.39894228040143268f;
      const float cdf = 0.5f * (1.0f + std::erf(g * kInvSqrt2));
      return {g * cdf, cdf + g * kInvSqrt2Pi * std::exp(-0.5f * g * g)};
    }
    case GateFunction::GeluTanh: {
      constexpr float kSqrt2OverPi = 0.79788456080286536f, kCubic = 0.044715f;
      const float t = std::tanh(kSqrt2OverPi * (g + kCubic * g * g * g));
      return {0.5f * g * (1.0f + t),
              0.5f * (1.0f + t) + 0.5f * g * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * g * g)};
    }
    case GateFunction::QuickGelu: {
      const float s = sigmoid(1.702f * g);
      return {g * s, s + 1.702f * g * s * (1.0f - s)};
    }
    case GateFunction::Relu:
      return {g > 0.0f ? g : 0.0f, g > 0.0f ? 1.0f : 0.0f};
    case GateFunction::Silu:
      break;
  }
  const float s = sigmoid(g);
  return {g * s, s * (1.0f + g * (1.0f - s))};  // d silu = s (1 + g (1 - s))
}

}  // namespace

Tensor gated_forward(const Tensor& gate_up, GateFunction gate) {
  return map_gate_up(gate_up, [gate](float g, float up) { return gate_value(gate, g).f * up; });
}

Tensor gated_backward(const Tensor& dout, const Tensor& gate_up, GateFunction gate) {
  return map_gate_up_backward(dout, gate_up, [gate](float g, float up, float d, float& dgate, float& dup) {
    const GateValue v = gate_value(gate, g);
    dup = d * v.f;
    dgate = d * up * v.df;
  });
}

Tensor clamped_swiglu_forward(const Tensor& gate_up, const SwigluClamp& clamp) {
  return map_gate_up(gate_up, [&](float gate, float up) {
    const float g = std::min(gate, clamp.limit), u = std::clamp(up, -clamp.limit, clamp.limit);
    return (u + 1.0f) * (g * sigmoid(g * clamp.alpha));
  });
}

Tensor clamped_swiglu_backward(const Tensor& dout, const Tensor& gate_up, const SwigluClamp& clamp) {
  return map_gate_up_backward(dout, gate_up, [&](float gate, float up, float d, float& dgate, float& dup) {
    const float g = std::min(gate, clamp.limit), u = std::clamp(up, -clamp.limit, clamp.limit);
    const float s = sigmoid(g * clamp.alpha);
    dup = up >= -clamp.limit && up <= clamp.limit ? d * g * s : 0.0f;
    // d/dg [g σ(αg)] = σ + α g σ (1 - σ)
    dgate = gate <= clamp.limit ? d * (u + 1.0f) * (s + clamp.alpha * g * s * (1.0f - s)) : 0.0f;
  });
}

}  // namespace moetune::ops
