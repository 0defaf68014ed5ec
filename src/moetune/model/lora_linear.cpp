#include "moetune/model/lora_linear.h"

#include "moetune/model/block_util.h"
#include "moetune/model/lora_weights.h"
#include "moetune/ops/lora.h"

namespace moetune::model {

std::vector<LoraPiece> lora_pieces(const ParameterStore& store, const std::string& weight) {
  std::vector<LoraPiece> pieces;
  const ModelWeights& weights = store.weights();
  if (!weights.lora) return pieces;
  const ParameterSpec* base = nullptr;
  for (const ParameterSpec& spec : weights.layout.parameters)
    if (spec.name == weight) base = &spec;
  if (!base) return pieces;
  int64_t first_column = 0;
  for (size_t piece = 0; piece < base->pieces.size(); ++piece) {
    const Param a = store.find(lora_parameter_name(weight, "lora_A", piece));
    if (a.defined())
      pieces.push_back({a, store.get(lora_parameter_name(weight, "lora_B", piece)), first_column,
                        ops::lora_module_id(lora_parameter_name(weight, "lora_A", piece))});
    first_column += base->pieces[piece].shape[0];
  }
  return pieces;
}

LoraLinear LoraLinear::lookup(const ParameterStore& store, const std::string& weight) {
  LoraLinear lora;
  for (LoraPiece& piece : lora_pieces(store, weight)) lora.adapters_.push_back({std::move(piece), {}, {}});
  if (lora.adapters_.empty()) return lora;
  const ModelWeights& weights = store.weights();
  lora.scale_ = weights.lora->scale();
  lora.dropout_ = weights.lora->dropout;
  lora.seed_ = weights.lora->seed;
  return lora;
}

void LoraLinear::forward(const Tensor& x, const Tensor& y, bool training, uint64_t draw) {
  for (Adapter& adapter : adapters_) {
    adapter.dropout = training ? ops::lora_dropout(dropout_, seed_, adapter.piece.module, draw) : ops::LoraDropout{};
    const Tensor input = adapter.dropout.active() ? ops::lora_dropout_apply(x, adapter.dropout) : x;
    adapter.u = ops::lora_forward(input, adapter.piece.a.value, adapter.piece.b.value, scale_, y, adapter.piece.first_column);
  }
}

void LoraLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  for (Adapter& adapter : adapters_) {
    const bool dropped = adapter.dropout.active();
    const Tensor input = dropped ? ops::lora_dropout_apply(x, adapter.dropout) : x;
    const Tensor dinput = dropped ? Tensor::zeros(x.shape(), DType::F32) : dx;
    ops::lora_backward(dy, adapter.piece.first_column, input, adapter.u, adapter.piece.a.value, adapter.piece.b.value, scale_,
                       adapter.piece.a.grad, adapter.piece.b.grad, dinput);
    if (dropped) ops::lora_dropout_add(dinput, adapter.dropout, dx);
  }
}

size_t LoraLinear::stash_bytes() const {
  size_t total = 0;
  for (const Adapter& adapter : adapters_) total += held_bytes({&adapter.u});
  return total;
}

void LoraLinear::clear_stash() {
  for (Adapter& adapter : adapters_) adapter.u = Tensor();
}

}  // namespace moetune::model
