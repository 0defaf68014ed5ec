// SwiGLU on a fused [gate | up] input: silu(gate) ⊙ up.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

// gate_up [T, 2I] with gate in the first I columns -> [T, I].
Tensor swiglu_forward(const Tensor& gate_up);
// Given d(out) [T, I]: returns d(gate_up) [T, 2I].
Tensor swiglu_backward(const Tensor& dout, const Tensor& gate_up);

}  // namespace moetune::ops
