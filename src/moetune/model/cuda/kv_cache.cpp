#include "moetune/model/cuda/kv_cache.h"

namespace moetune::model::cuda {

void KvCache::start_pass(int64_t count) {
  if (tokens_ + count > capacity_)
    fail("the KV cache holds {} tokens and {} more do not fit its {} (made for the prompt and --max-new-tokens)",
         tokens_, count, capacity_);
  next_ = next_recurrent_ = 0;
  pending_ = count;
}

std::pair<Tensor, Tensor> KvCache::next_layer(int64_t kv_heads, int64_t key_width, int64_t value_width) {
  if (next_ == layers_.size()) {
    MOETUNE_CHECK(tokens_ == 0, "KvCache: a new attention sublayer after {} tokens", tokens_);
    layers_.emplace_back(
        Tensor::empty({capacity_, kv_heads, key_width}, DType::BF16, Device::cuda()),
        value_width > 0 ? Tensor::empty({capacity_, kv_heads, value_width}, DType::BF16, Device::cuda()) : Tensor());
  }
  const auto& layer = layers_[next_++];
  const int64_t held_value_width = layer.second.defined() ? layer.second.size(2) : 0;
  MOETUNE_CHECK(layer.first.size(1) == kv_heads && layer.first.size(2) == key_width && held_value_width == value_width,
                "KvCache: sublayer {} holds keys {} and values {} but was asked for {} kv heads of {} and {}",
                next_ - 1, layer.first.str(), layer.second.str(), kv_heads, key_width, value_width);
  return layer;
}

std::pair<Tensor, Tensor> KvCache::next_recurrent_layer(const Shape& conv_window, const Shape& state) {
  if (next_recurrent_ == recurrent_layers_.size()) {
    MOETUNE_CHECK(tokens_ == 0, "KvCache: a new recurrent sublayer after {} tokens", tokens_);
    recurrent_layers_.emplace_back(Tensor::zeros(conv_window, DType::BF16, Device::cuda()),
                                   Tensor::zeros(state, DType::F32, Device::cuda()));
  }
  const auto& layer = recurrent_layers_[next_recurrent_++];
  MOETUNE_CHECK(layer.first.shape() == conv_window && layer.second.shape() == state,
                "KvCache: recurrent sublayer {} holds {} and {} but was asked for {} and {}", next_recurrent_ - 1,
                layer.first.str(), layer.second.str(), shape_str(conv_window), shape_str(state));
  return layer;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const auto& [k, v] : layers_) total += k.nbytes() + (v.defined() ? v.nbytes() : 0);
  for (const auto& [window, state] : recurrent_layers_) total += window.nbytes() + state.nbytes();
  return total;
}

}  // namespace moetune::model::cuda
