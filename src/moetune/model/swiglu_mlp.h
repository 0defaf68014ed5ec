// A SwiGLU MLP over already-normalised rows, down(swiglu(gate_up(x))), with its backward: the dense MLP block
// and a MoE layer's shared expert both run it (CPU, fp32). Another gate function (MlpSpec::gate, hidden_act) gives
// down(f(gate) ⊙ up); with Activation::ReluSquared (Nemotron-H) it is down(relu(up(x))²), `gate_up` holding up alone.
#pragma once

#include "moetune/model/block_params.h"
#include "moetune/model/lora_linear.h"
#include "moetune/model/model_spec.h"

namespace moetune::model {

struct SwigluOutput {
  Tensor out;      // [T, H]
  Tensor gate_up;  // [T, 2I] pre-activation: what the backward pass needs besides x
};

// The LoRA adapters on its two weights ("<prefix>gate_up", "<prefix>down"); empty without LoRA.
struct SwigluLora {
  LoraLinear gate_up, down;
  bool training = false;  // set by the block per forward: LoRA dropout applies, with the masks of this draw
  uint64_t draw = 0;
  static SwigluLora lookup(const ParameterStore& store, const std::string& prefix) {
    return {LoraLinear::lookup(store, prefix + "gate_up"), LoraLinear::lookup(store, prefix + "down"), false, 0};
  }
  size_t stash_bytes() const { return gate_up.stash_bytes() + down.stash_bytes(); }
  void clear_stash() {
    gate_up.clear_stash();
    down.clear_stash();
  }
};

SwigluOutput swiglu_mlp(const Tensor& x, const SwigluParams& p, SwigluLora* lora = nullptr, const MlpSpec& mlp = {});
// Accumulates the weight gradients; returns d(x).
Tensor swiglu_mlp_backward(const Tensor& dout, const Tensor& x, const Tensor& gate_up, const SwigluParams& p,
                           SwigluLora* lora = nullptr, const MlpSpec& mlp = {});

}  // namespace moetune::model
