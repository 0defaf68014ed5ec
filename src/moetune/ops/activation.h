// SwiGLU on a fused [gate | up] input: silu(gate) ⊙ up; the same gated product with the gate's other functions
// transformers' hidden_act names (GeGLU and kin); and GPT-OSS's clamped variant.
#pragma once

#include <optional>
#include <string_view>

#include "moetune/core/tensor.h"

namespace moetune::ops {

// The function f of a gated MLP's f(gate) ⊙ up, as transformers' ACT2FN computes it for `hidden_act`:
//   Silu      "silu", "swish": g σ(g)
//   Gelu      "gelu": g Φ(g), the exact (erf) GELU
//   GeluTanh  "gelu_pytorch_tanh", "gelu_new", "gelu_fast": ½ g (1 + tanh(√(2/π) (g + 0.044715 g³)))
//   QuickGelu "quick_gelu": g σ(1.702 g)
//   Relu      "relu": max(g, 0)
enum class GateFunction { Silu, Gelu, GeluTanh, QuickGelu, Relu };
std::optional<GateFunction> gate_function_for_hidden_act(std::string_view hidden_act);
const char* gate_function_name(GateFunction gate);  // the first hidden_act spelling above

// f(gate) ⊙ up and its backward for any GateFunction (swiglu_forward / swiglu_backward are GateFunction::Silu's).
Tensor gated_forward(const Tensor& gate_up, GateFunction gate);
Tensor gated_backward(const Tensor& dout, const Tensor& gate_up, GateFunction gate);

// gate_up [T, 2I] with gate in the first I columns -> [T, I].
Tensor swiglu_forward(const Tensor& gate_up);
// Given d(out) [T, I]: returns d(gate_up) [T, 2I].
Tensor swiglu_backward(const Tensor& dout, const Tensor& gate_up);

// GPT-OSS (transformers' GptOssExperts._apply_gate, constants hard-coded there): gate clamped above at `limit`, up
// clamped to [-limit, limit], out = (up + 1) · gate · σ(alpha · gate). Same [gate | up] input as swiglu_forward
// (the family's load de-interleaves the checkpoint's gate/up pairs).
struct SwigluClamp {
  float alpha = 1.702f;
  float limit = 7.0f;
};
Tensor clamped_swiglu_forward(const Tensor& gate_up, const SwigluClamp& clamp);
// A clamped value passes no gradient (torch's clamp backward: only where min <= x <= max).
Tensor clamped_swiglu_backward(const Tensor& dout, const Tensor& gate_up, const SwigluClamp& clamp);

}  // namespace moetune::ops
