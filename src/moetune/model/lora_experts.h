// The experts' SwiGLU MLPs with LoRA on their fused weights (PEFT's target_parameters mlp.experts.gate_up_proj /
// down_proj): for expert e's rows X_e of the expert-major buffer, pre = X_e W1_eᵀ + b1_e + s·(X_e A1_eᵀ) B1_eᵀ,
// out = h W2_eᵀ + b2_e + s·(h A2_eᵀ) B2_eᵀ with h = swiglu(pre) (GPT-OSS: its biases and clamped SwiGLU): per-expert
// GEMMs over each expert's contiguous rows (the CPU's stand-in for grouped GEMMs, as ops::expert_mlp), never a loop
// over tokens. The MoE block runs this instead of ops::expert_mlp when the layer has expert adapters.
#pragma once

#include "moetune/model/parameter_store.h"
#include "moetune/ops/experts.h"

namespace moetune::model {

// A layer's expert adapters (on "layers.N.moe.experts_gate_up" / "experts_down"; `layer` is "layers.N."), each
// pair undefined when not targeted; the CPU and GPU blocks both look them up so.
struct ExpertLoraParams {
  Param gate_up_a, gate_up_b, down_a, down_b;
  double scale = 0;
  static ExpertLoraParams lookup(const ParameterStore& store, const std::string& layer);
  bool empty() const { return !gate_up_a.defined() && !down_a.defined(); }
};

class ExpertLora {
 public:
  ExpertLora() = default;
  // The adapters on "layers.N.moe.experts_gate_up" / "experts_down" (`layer` is "layers.N."); empty when none.
  static ExpertLora lookup(const ParameterStore& store, const std::string& layer);

  bool empty() const { return p_.empty(); }
  // `variant`: the experts' biases and clamped SwiGLU (GPT-OSS), as ops::expert_mlp takes them.
  ops::ExpertActivations forward(const Tensor& rows, const std::vector<int64_t>& offsets, const Param& gate_up,
                                 const Param& down, const ops::ExpertVariant& variant);
  // Accumulates the adapters' gradients (the frozen base weights get none; the biases theirs where `bias_grads`
  // defines them); returns d(rows).
  Tensor backward(const Tensor& dout, const Tensor& rows, const ops::ExpertActivations& activations,
                  const std::vector<int64_t>& offsets, const Param& gate_up, const Param& down,
                  const ops::ExpertVariant& variant, const ops::ExpertBiasGrads& bias_grads);
  size_t stash_bytes() const;
  void clear_stash() { gate_up_u_ = down_u_ = Tensor(); }

 private:
  ExpertLoraParams p_;
  Tensor gate_up_u_, down_u_;  // X Aᵀ per row, for the backward pass
};

}  // namespace moetune::model
