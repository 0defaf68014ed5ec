#include "moetune/model/cuda/lora_linear.h"

#include "moetune/model/block_util.h"
#include "moetune/model/lora_config.h"
#include "moetune/ops/cuda/lora.h"

namespace moetune::model::cuda {

LoraLinear LoraLinear::lookup(const ParameterStore& store, const std::string& weight) {
  LoraLinear lora;
  for (LoraPiece& piece : lora_pieces(store, weight)) lora.adapters_.push_back({std::move(piece), {}});
  if (lora.adapters_.empty()) return lora;
  const LoraConfig& config = *store.weights().lora;
  MOETUNE_CHECK(config.dropout == 0, "{}: LoRA dropout ({}) does not run on the GPU", weight, config.dropout);
  lora.scale_ = config.scale();
  return lora;
}

void LoraLinear::forward(const Tensor& x, const Tensor& y) {
  for (Adapter& adapter : adapters_)
    adapter.u = ops::cuda::lora_forward(x, adapter.piece.a.value, adapter.piece.b.value, scale_, y, adapter.piece.first_column);
}

void LoraLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  for (Adapter& adapter : adapters_)
    ops::cuda::lora_backward(dy, adapter.piece.first_column, x, adapter.u, adapter.piece.a.value, adapter.piece.b.value, scale_,
                             adapter.piece.a.grad, adapter.piece.b.grad, dx);
}

size_t LoraLinear::stash_bytes() const {
  size_t total = 0;
  for (const Adapter& adapter : adapters_) total += held_bytes({&adapter.u});
  return total;
}

void LoraLinear::clear_stash() {
  for (Adapter& adapter : adapters_) adapter.u = Tensor();
}

}  // namespace moetune::model::cuda
