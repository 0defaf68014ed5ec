// A SwiGLU MLP over already-normalised rows on the GPU, down(swiglu(gate_up(x))), and its backward: the dense
// MLP block and a MoE layer's shared expert both run it. With `mlp`'s activation relu² (Nemotron-H) it is
// down(relu(up(x))²), `gate_up` holding up alone. The CPU twin is model/swiglu_mlp.h.
#pragma once

#include <vector>

#include "moetune/model/block_params.h"
#include "moetune/model/cuda/lora_linear.h"
#include "moetune/model/model_spec.h"

namespace moetune::model::cuda {

// Writes out [T, H] (residual + the MLP's output when `residual` is given: added in down's GEMM); returns the
// pre-activation [T, 2I] ([T, I] for relu²), what the backward pass needs besides x. `lora`: the adapters on its
// weights, if any; `mlp`: the activation (the default: SwiGLU). `kept_activation`, when given: set to the
// activation [T, I] (down's input), for the backward pass to read instead of computing it again.
Tensor swiglu_mlp(const Tensor& x, const SwigluParams& p, const Tensor& out, SwigluLora* lora = nullptr,
                  const MlpSpec& mlp = {}, const Tensor& residual = {}, Tensor* kept_activation = nullptr);
// Accumulates the weight gradients (writes them when write_weight_grads: ops/cuda/gemm.h write_dweight; the
// biases' always add); writes d(x) into dx, or adds it there when accumulate_dx. `activation`: the forward's
// kept activation, or undefined (then it is computed again).
void swiglu_mlp_backward(const Tensor& dout, const Tensor& x, const Tensor& gate_up, const SwigluParams& p,
                         const Tensor& dx, bool accumulate_dx, SwigluLora* lora = nullptr, const MlpSpec& mlp = {},
                         bool write_weight_grads = false, const Tensor& activation = {});
// The weight gradients swiglu_mlp_backward writes whole when told to (the defined ones of gate_up and down).
void add_swiglu_weight_grads(const SwigluParams& p, std::vector<Tensor>& grads);

}  // namespace moetune::model::cuda
