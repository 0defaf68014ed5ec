// The model's parameters with a gradient beside each trainable one, looked up by engine name
// ("layers.0.attn.qkv"). Gradients live in flat runs laid out as the parameters' (model/placed_buffers.h; a
// frozen parameter has none), zeroed in one call per run.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "moetune/core/flat_buffers.h"
#include "moetune/model/checkpoint.h"

namespace moetune::model {

struct Param {
  Tensor value, grad;  // both undefined for an optional parameter the model does not have (a bias); grad
                       // undefined for a frozen one
  bool defined() const { return value.defined(); }
};

// Where the gradients live. Flat: one run per placement and dtype (what ZeRO reduces). LayerArena: every decoder
// layer's gradients in one shared buffer the size of the largest layer's, the rest (embedding, final norm, LM
// head) in flat runs. Only right when each layer's gradients are consumed (the update during the backward pass,
// train/cuda/update_in_backward.h) and the arena zeroed before the next layer's backward pass writes it.
enum class GradientStorage { Flat, LayerArena };

class ParameterStore {
 public:
  // Gradients start at zero, same dtype and device.
  explicit ParameterStore(model::ModelWeights weights, GradientStorage storage = GradientStorage::Flat);

  Param get(const std::string& name) const;   // fails naming the parameter when absent
  Param find(const std::string& name) const;  // undefined Param when absent
  // Fails naming the first LoRA adapter (model/lora_weights.h) that no block asked for by find or get: an adapter
  // its block does not run would be made, saved and never trained. A model calls it once its blocks are built.
  void require_lora_adapters_looked_up() const;
  void zero_grad();
  // LayerArena: zeroes the layers' shared buffer (queued on the GPU's stream), for the next layer.
  void zero_layer_arena();
  size_t layer_arena_bytes() const { return layer_arena_.defined() ? layer_arena_.nbytes() : 0; }

  const model::ModelWeights& weights() const { return weights_; }
  std::vector<Tensor>& values() { return weights_.parameters; }
  // Parallel to values(); undefined for frozen parameters.
  std::vector<Tensor>& grads() { return grad_storage_.views; }
  const std::vector<Tensor>& grads() const { return grad_storage_.views; }
  // The flat runs (one per dtype) of the replicated parameters' and the expert parameters' gradients.
  const std::vector<Tensor>& replicated_grad_runs() const { return grad_storage_.replicated.buffers; }
  const std::vector<Tensor>& expert_grad_runs() const { return grad_storage_.experts.buffers; }

 private:
  model::ModelWeights weights_;
  PlacedBuffers grad_storage_;
  Tensor layer_arena_;  // U8; undefined unless LayerArena
  std::map<std::string, size_t> index_;
  // Parallel to the parameters: whether find or get returned it (atomic: a lookup may come from any thread).
  std::unique_ptr<std::atomic<bool>[]> looked_up_;
};

}  // namespace moetune::model
