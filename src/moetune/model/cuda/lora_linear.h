// The LoRA adapters on one of a GPU block's projections (the CPU twin is model/lora_linear.h): after y = x Wᵀ
// the block calls forward(x, y), which adds scale · (x Aᵀ) Bᵀ into each adapted piece's columns of y (q, k and v
// of the fused qkv weight each have their own A and B, as PEFT's q_proj/k_proj/v_proj do); backward adds their
// part of d(x) and accumulates dA, dB. Keeps u = dropout(x) Aᵀ ([T, r], bf16) per adapter for the backward pass.
// LoRA dropout (training steps only) uses the counter-based masks of ops/lora_dropout.h, the CPU engine's: the
// pass names its draw (a recomputed forward its first pass's), and the backward pass regenerates the mask from
// its key instead of keeping it. Several adapters on one input without dropout (q, k, v)
// run as one stacked product (ops/cuda/lora_stacked.h), keeping one u [T, n·r]. A projection without adapters
// costs nothing.
#pragma once

#include <string>
#include <vector>

#include "moetune/model/cuda/step_context.h"
#include "moetune/model/lora_linear.h"
#include "moetune/ops/cuda/lora_stacked.h"

namespace moetune::model::cuda {

class LoraLinear {
 public:
  LoraLinear() = default;
  static LoraLinear lookup(const ParameterStore& store, const std::string& weight);

  bool empty() const { return adapters_.empty(); }
  void forward(const Tensor& x, const Tensor& y, LoraPass pass = {});
  void backward(const Tensor& dy, const Tensor& x, const Tensor& dx);
  size_t stash_bytes() const;
  void clear_stash();

 private:
  struct Adapter {
    LoraPiece piece;
    Tensor u;
    ops::LoraDropout dropout;  // the last forward's mask (inactive without dropout or outside training)
  };
  bool stackable() const;
  std::vector<ops::cuda::StackedPiece> stacked_pieces() const;

  std::vector<Adapter> adapters_;
  Tensor stacked_u_;  // x A_stackᵀ of the last forward when it ran stacked (then the adapters' u are undefined)
  double scale_ = 0, dropout_ = 0;
  uint64_t seed_ = 0;
};

// The adapters on a SwiGLU MLP's two weights ("<prefix>gate_up", "<prefix>down").
struct SwigluLora {
  LoraLinear gate_up, down;
  LoraPass pass;  // set by the block per forward: LoRA dropout applies
  static SwigluLora lookup(const ParameterStore& store, const std::string& prefix) {
    return {LoraLinear::lookup(store, prefix + "gate_up"), LoraLinear::lookup(store, prefix + "down"), {}};
  }
  size_t stash_bytes() const { return gate_up.stash_bytes() + down.stash_bytes(); }
  void clear_stash() {
    gate_up.clear_stash();
    down.clear_stash();
  }
};

}  // namespace moetune::model::cuda
