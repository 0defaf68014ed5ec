#include "moetune/model/parameter_store.h"

#include <algorithm>

#include "moetune/model/gradient_ready_layer.h"
#include "moetune/model/lora_weights.h"

namespace moetune::model {

ParameterStore::ParameterStore(model::ModelWeights weights, GradientStorage storage)
    : weights_(std::move(weights)), looked_up_(new std::atomic<bool>[weights_.parameters.size()]()) {
  const int64_t layers = weights_.spec().num_layers();
  std::vector<FlatRequest> requests;
  std::vector<int64_t> arena_layer(weights_.parameters.size(), -1);  // the layer of a gradient in the arena
  for (size_t i = 0; i < weights_.parameters.size(); ++i) {
    const Tensor& value = weights_.parameters[i];
    const ParameterSpec& spec = weights_.layout.parameters[i];
    const int64_t layer = gradient_ready_layer(spec.name, layers);
    if (storage == GradientStorage::LayerArena && spec.trainable && layer >= 0 && layer < layers) arena_layer[i] = layer;
    requests.push_back({value.shape(), value.dtype(), spec.trainable && arena_layer[i] < 0});
    index_[spec.name] = i;
  }
  const Device device = weights_.parameters.empty() ? Device::cpu() : weights_.parameters[0].device();
  // Laid out as the parameters are (same requests, same runs), so a ZeRO shard of a gradient run is the
  // gradient of the same shard of the parameter run.
  grad_storage_ = allocate_by_placement(weights_.layout, requests, device, /*zeroed=*/true, weights_.shards);
  if (storage == GradientStorage::Flat) return;
  // Each layer's gradients at aligned offsets from the arena's start; the arena as large as the largest layer.
  std::vector<size_t> offsets(weights_.parameters.size(), 0), used(size_t(std::max<int64_t>(layers, 1)), 0);
  for (size_t i = 0; i < weights_.parameters.size(); ++i) {
    if (arena_layer[i] < 0) continue;
    size_t& end = used[size_t(arena_layer[i])];
    offsets[i] = end;
    end = (end + weights_.parameters[i].nbytes() + kFlatAlignmentBytes - 1) / kFlatAlignmentBytes * kFlatAlignmentBytes;
  }
  layer_arena_ = Tensor::zeros({int64_t(*std::max_element(used.begin(), used.end()))}, DType::U8, device);
  for (size_t i = 0; i < weights_.parameters.size(); ++i)
    if (arena_layer[i] >= 0)
      grad_storage_.views[i] = Tensor(layer_arena_.storage(), offsets[i], weights_.parameters[i].shape(),
                                      weights_.parameters[i].dtype());
}

Param ParameterStore::find(const std::string& name) const {
  auto found = index_.find(name);
  if (found == index_.end()) return Param{};
  looked_up_[found->second].store(true, std::memory_order_relaxed);
  return Param{weights_.parameters[found->second], grad_storage_.views[found->second]};
}

void ParameterStore::require_lora_adapters_looked_up() const {
  for (size_t i = 0; i < weights_.parameters.size(); ++i) {
    const ParameterSpec& spec = weights_.layout.parameters[i];
    if (!is_lora_parameter(spec) || looked_up_[i].load(std::memory_order_relaxed)) continue;
    const std::string& hf = spec.pieces.empty() ? spec.name : spec.pieces[0].name;
    fail(
        "lora: the adapter '{}' ({}) is on a weight whose block in this {} model does not run LoRA adapters; "
        "leave that module out of lora.target_modules",
        spec.name, hf, weights_.spec().architecture);
  }
}

Param ParameterStore::get(const std::string& name) const {
  Param param = find(name);
  if (!param.defined()) fail("no parameter '{}' in this {} model", name, weights_.spec().architecture);
  return param;
}

void ParameterStore::zero_grad() {
  grad_storage_.replicated.zero();
  grad_storage_.experts.zero();
  zero_layer_arena();
}

void ParameterStore::zero_layer_arena() {
  if (layer_arena_.defined()) zero_bytes(layer_arena_.raw_data(), layer_arena_.device(), layer_arena_.nbytes());
}

}  // namespace moetune::model
