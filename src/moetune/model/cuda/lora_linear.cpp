#include "moetune/model/cuda/lora_linear.h"

#include "moetune/model/block_util.h"
#include "moetune/model/lora_config.h"
#include "moetune/ops/cuda/lora.h"
#include "moetune/ops/cuda/lora_stacked.h"

namespace moetune::model::cuda {

LoraLinear LoraLinear::lookup(const ParameterStore& store, const std::string& weight) {
  LoraLinear lora;
  for (LoraPiece& piece : lora_pieces(store, weight)) lora.adapters_.push_back({std::move(piece), {}, {}});
  if (lora.adapters_.empty()) return lora;
  const LoraConfig& config = *store.weights().lora;
  lora.scale_ = config.scale();
  lora.dropout_ = config.dropout;
  lora.seed_ = config.seed;
  return lora;
}

// Stacked when several adapters share the input unmasked, their gradients (if any) bf16 as the GEMMs write them.
bool LoraLinear::stackable() const {
  if (adapters_.size() < 2) return false;
  for (const Adapter& adapter : adapters_)
    for (const Param* p : {&adapter.piece.a, &adapter.piece.b})
      if (p->grad.defined() && p->grad.dtype() != DType::BF16) return false;
  return true;
}

std::vector<ops::cuda::StackedPiece> LoraLinear::stacked_pieces() const {
  std::vector<ops::cuda::StackedPiece> pieces;
  for (const Adapter& adapter : adapters_)
    pieces.push_back({adapter.piece.a.value, adapter.piece.b.value, adapter.piece.first_column});
  return pieces;
}

void LoraLinear::forward(const Tensor& x, const Tensor& y, LoraPass pass) {
  const bool draws = pass.training && dropout_ > 0;
  stacked_u_ = Tensor();
  if (!draws && stackable()) {
    const std::vector<ops::cuda::StackedPiece> pieces = stacked_pieces();
    const int64_t width = y.numel() / y.size(0);
    stacked_u_ = ops::cuda::lora_stacked_forward(x, ops::cuda::stack_a(pieces), ops::cuda::block_diagonal_b(pieces, width),
                                                 scale_, y);
    for (Adapter& adapter : adapters_) adapter.dropout = {};
    return;
  }
  for (Adapter& adapter : adapters_) {
    adapter.dropout = draws ? ops::lora_dropout(dropout_, seed_, adapter.piece.module, pass.draw) : ops::LoraDropout{};
    const Tensor input = adapter.dropout.active() ? ops::cuda::lora_dropout_apply(x, adapter.dropout) : x;
    adapter.u = ops::cuda::lora_forward(input, adapter.piece.a.value, adapter.piece.b.value, scale_, y, adapter.piece.first_column);
  }
}

void LoraLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  if (stacked_u_.defined()) {  // the A stack and block-diagonal B again from the (unchanged) values: small
    const std::vector<ops::cuda::StackedPiece> pieces = stacked_pieces();
    std::vector<Tensor> a_grads, b_grads;
    for (const Adapter& adapter : adapters_) {
      a_grads.push_back(adapter.piece.a.grad);
      b_grads.push_back(adapter.piece.b.grad);
    }
    ops::cuda::lora_stacked_backward(dy, x, stacked_u_, pieces, ops::cuda::stack_a(pieces),
                                     ops::cuda::block_diagonal_b(pieces, dy.numel() / dy.size(0)), scale_, a_grads,
                                     b_grads, dx);
    return;
  }
  for (Adapter& adapter : adapters_) {
    const bool dropped = adapter.dropout.active();
    // The masked input again from its key, and d(masked input) through the same mask into dx.
    const Tensor input = dropped ? ops::cuda::lora_dropout_apply(x, adapter.dropout) : x;
    const Tensor dinput = dropped ? Tensor::zeros(x.shape(), DType::BF16, Device::cuda()) : dx;
    ops::cuda::lora_backward(dy, adapter.piece.first_column, input, adapter.u, adapter.piece.a.value, adapter.piece.b.value,
                             scale_, adapter.piece.a.grad, adapter.piece.b.grad, dinput);
    if (dropped) ops::cuda::lora_dropout_add(dinput, adapter.dropout, dx);
  }
}

size_t LoraLinear::stash_bytes() const {
  size_t total = held_bytes({&stacked_u_});
  for (const Adapter& adapter : adapters_) total += held_bytes({&adapter.u});
  return total;
}

void LoraLinear::clear_stash() {
  stacked_u_ = Tensor();
  for (Adapter& adapter : adapters_) adapter.u = Tensor();
}

}  // namespace moetune::model::cuda
