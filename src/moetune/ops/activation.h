// SwiGLU on a fused [gate | up] input: silu(gate) ⊙ up; and GPT-OSS's clamped variant.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

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
