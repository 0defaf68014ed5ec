// The LoRA adapters on one of a GPU block's projections (the CPU twin is model/lora_linear.h): after y = x Wᵀ
// the block calls forward(x, y), which adds scale · (x Aᵀ) Bᵀ into each adapted piece's columns of y (q, k and v
// of the fused qkv weight each have their own A and B, as PEFT's q_proj/k_proj/v_proj do); backward adds their
// part of d(x) and accumulates dA, dB. Keeps u = x Aᵀ ([T, r], bf16) per adapter for the backward pass. LoRA
// dropout is not run on the GPU (the engine refuses lora.dropout > 0 there). A projection without adapters costs
// nothing.
#pragma once

#include <string>
#include <vector>

#include "moetune/model/lora_linear.h"

namespace moetune::model::cuda {

class LoraLinear {
 public:
  LoraLinear() = default;
  static LoraLinear lookup(const ParameterStore& store, const std::string& weight);

  bool empty() const { return adapters_.empty(); }
  void forward(const Tensor& x, const Tensor& y);
  void backward(const Tensor& dy, const Tensor& x, const Tensor& dx);
  size_t stash_bytes() const;
  void clear_stash();

 private:
  struct Adapter {
    LoraPiece piece;
    Tensor u;
  };
  std::vector<Adapter> adapters_;
  double scale_ = 0;
};

// The adapters on a SwiGLU MLP's two weights ("<prefix>gate_up", "<prefix>down").
struct SwigluLora {
  LoraLinear gate_up, down;
  static SwigluLora lookup(const ParameterStore& store, const std::string& prefix) {
    return {LoraLinear::lookup(store, prefix + "gate_up"), LoraLinear::lookup(store, prefix + "down")};
  }
  size_t stash_bytes() const { return gate_up.stash_bytes() + down.stash_bytes(); }
  void clear_stash() {
    gate_up.clear_stash();
    down.clear_stash();
  }
};

}  // namespace moetune::model::cuda
