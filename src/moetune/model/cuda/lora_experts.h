// LoRA on a GPU MoE layer's experts (PEFT's target_parameters mlp.experts.gate_up_proj / down_proj; the CPU twin
// is model/lora_experts.h): after each grouped GEMM over the expert-major rows the block adds expert e's
// s·(X_e A_eᵀ) B_eᵀ, as two more grouped GEMMs of rank r (ops/cuda/lora.h), never a loop over experts. Keeps
// u = X Aᵀ ([rows, r]) per adapted weight for the backward pass.
#pragma once

#include "moetune/model/lora_experts.h"

namespace moetune::model::cuda {

class ExpertLora {
 public:
  ExpertLora() = default;
  static ExpertLora lookup(const ParameterStore& store, const std::string& layer);

  bool empty() const { return p_.empty(); }
  bool on_gate_up() const { return p_.gate_up_a.defined(); }
  bool on_down() const { return p_.down_a.defined(); }
  // Add into the grouped GEMMs' outputs: pre [R, 2I] from rows [R, H]; out [R, H] from the activation [R, I].
  void gate_up_forward(const Tensor& rows, const Tensor& offsets, const Tensor& pre);
  void down_forward(const Tensor& activated, const Tensor& offsets, const Tensor& out);
  // Accumulate the adapters' gradients and add their part of d(input) into dx.
  void gate_up_backward(const Tensor& dpre, const Tensor& rows, const Tensor& offsets, const Tensor& drows);
  void down_backward(const Tensor& dout, const Tensor& activated, const Tensor& offsets, const Tensor& dactivated);
  size_t stash_bytes() const;
  void clear_stash() { gate_up_u_ = down_u_ = Tensor(); }

 private:
  ExpertLoraParams p_;
  Tensor gate_up_u_, down_u_;
};

}  // namespace moetune::model::cuda
