#include "moetune/model/lora_linear.h"

#include <functional>

#include "moetune/model/block_util.h"
#include "moetune/model/lora_weights.h"
#include "moetune/ops/lora.h"

namespace moetune::model {
namespace {

Tensor multiply(const Tensor& x, const Tensor& keep) {
  Tensor out = x.clone();
  for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] *= keep.data<float>()[i];
  return out;
}

}  // namespace

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
    if (a.defined()) pieces.push_back({a, store.get(lora_parameter_name(weight, "lora_B", piece)), first_column});
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
  lora.rng_.seed(weights.lora->seed ^ std::hash<std::string>{}(weight));
  return lora;
}

void LoraLinear::forward(const Tensor& x, const Tensor& y, bool training) {
  for (Adapter& adapter : adapters_) {
    adapter.keep = Tensor();
    if (dropout_ > 0 && training) {  // each adapter draws its own mask, as PEFT's per-module nn.Dropout does
      adapter.keep = Tensor::empty(x.shape(), DType::F32);
      std::bernoulli_distribution kept(1.0 - dropout_);
      for (int64_t i = 0; i < x.numel(); ++i) adapter.keep.data<float>()[i] = kept(rng_) ? float(1.0 / (1.0 - dropout_)) : 0.0f;
    }
    const Tensor input = adapter.keep.defined() ? multiply(x, adapter.keep) : x;
    adapter.u = ops::lora_forward(input, adapter.piece.a.value, adapter.piece.b.value, scale_, y, adapter.piece.first_column);
  }
}

void LoraLinear::backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  for (Adapter& adapter : adapters_) {
    const Tensor input = adapter.keep.defined() ? multiply(x, adapter.keep) : x;
    const Tensor dinput = adapter.keep.defined() ? Tensor::zeros(x.shape(), DType::F32) : dx;
    ops::lora_backward(dy, adapter.piece.first_column, input, adapter.u, adapter.piece.a.value, adapter.piece.b.value, scale_,
                       adapter.piece.a.grad, adapter.piece.b.grad, dinput);
    if (adapter.keep.defined()) {
      const Tensor through = multiply(dinput, adapter.keep);
      for (int64_t i = 0; i < dx.numel(); ++i) dx.data<float>()[i] += through.data<float>()[i];
    }
  }
}

size_t LoraLinear::stash_bytes() const {
  size_t total = 0;
  for (const Adapter& adapter : adapters_) total += held_bytes({&adapter.u, &adapter.keep});
  return total;
}

void LoraLinear::clear_stash() {
  for (Adapter& adapter : adapters_) adapter.u = adapter.keep = Tensor();
}

}  // namespace moetune::model
