// The LoRA adapters on one of a block's projections, as the CPU blocks run them: after y = x Wᵀ the block calls
// forward(x, y), which adds scale · (dropout(x) Aᵀ) Bᵀ into each adapted piece's columns of y (q, k and v of a
// fused qkv weight each have their own A, B and dropout mask, as PEFT's q_proj/k_proj/v_proj do); backward adds
// their part of d(x) and accumulates dA, dB. A projection without adapters costs nothing.
#pragma once

#include <string>
#include <vector>

#include "moetune/model/parameter_store.h"
#include "moetune/ops/lora_dropout.h"

namespace moetune::model {

// One adapter of a projection: its A and B, the first of the projection's output columns it writes, and its
// name for LoRA dropout's masks (ops/lora_dropout.h: each adapter draws its own, as PEFT's per-module nn.Dropout).
struct LoraPiece {
  Param a, b;
  int64_t first_column = 0;
  uint64_t module = 0;
};
// The adapters on engine weight `weight`, in piece order (the CPU and GPU blocks both look them up so); none when
// the model has no LoRA on it.
std::vector<LoraPiece> lora_pieces(const ParameterStore& store, const std::string& weight);

class LoraLinear {
 public:
  LoraLinear() = default;
  // The adapters of engine weight `weight` ("layers.0.attn.qkv"); none when the model has no LoRA on it.
  static LoraLinear lookup(const ParameterStore& store, const std::string& weight);

  bool empty() const { return adapters_.empty(); }
  // Dropout applies only when `training` (a training step; evaluation and generation run without it, as PEFT's
  // eval mode does), with the masks of draw `draw` (ops/lora_dropout.h; the model numbers its training forwards).
  void forward(const Tensor& x, const Tensor& y, bool training, uint64_t draw);
  void backward(const Tensor& dy, const Tensor& x, const Tensor& dx);
  size_t stash_bytes() const;
  void clear_stash();

 private:
  struct Adapter {
    LoraPiece piece;
    Tensor u;                  // dropout(x) Aᵀ of the last forward
    ops::LoraDropout dropout;  // the last forward's mask (inactive without dropout or outside training)
  };
  std::vector<Adapter> adapters_;
  double scale_ = 0, dropout_ = 0;
  uint64_t seed_ = 0;
};

}  // namespace moetune::model
