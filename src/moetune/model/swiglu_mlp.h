// A SwiGLU MLP over already-normalised rows, down(swiglu(gate_up(x))), with its backward: the dense MLP block
// and a MoE layer's shared expert both run it (CPU, fp32).
#pragma once

#include "moetune/model/block_params.h"

namespace moetune::model {

struct SwigluOutput {
  Tensor out;      // [T, H]
  Tensor gate_up;  // [T, 2I] pre-activation: what the backward pass needs besides x
};

SwigluOutput swiglu_mlp(const Tensor& x, const SwigluParams& p);
// Accumulates the weight gradients; returns d(x).
Tensor swiglu_mlp_backward(const Tensor& dout, const Tensor& x, const Tensor& gate_up, const SwigluParams& p);

}  // namespace moetune::model
