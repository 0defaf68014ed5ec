#include "moetune/model/kv_cache.h"

#include "moetune/model/block_util.h"

namespace moetune::model {

std::pair<Tensor, Tensor> KvCache::append(const Tensor& k, const Tensor& v) {
  MOETUNE_CHECK(k.size(0) == pending_ && v.size(0) == pending_, "KvCache: {} new keys in a pass of {} tokens", k.size(0),
                pending_);
  if (next_ == layers_.size()) layers_.emplace_back();
  auto& [keys, values] = layers_[next_++];
  MOETUNE_CHECK(!keys.defined() || keys.size(0) == tokens_, "KvCache: a sublayer holds {} keys of {} tokens",
                keys.size(0), tokens_);
  // Copied whole each step: O(sequence) per token, as the attention itself is; the CPU engine runs small models.
  keys = concatenate_rows(keys, k);
  values = concatenate_rows(values, v);
  return {keys, values};
}

std::pair<Tensor, Tensor> KvCache::recurrent_state(const Shape& conv_window, const Shape& state) {
  if (next_recurrent_ == recurrent_.size()) {
    MOETUNE_CHECK(tokens_ == 0, "KvCache: a new recurrent sublayer after {} tokens", tokens_);
    recurrent_.emplace_back(Tensor::zeros(conv_window, DType::F32), Tensor::zeros(state, DType::F32));
  }
  const auto& held = recurrent_[next_recurrent_++];
  MOETUNE_CHECK(held.first.shape() == conv_window && held.second.shape() == state,
                "KvCache: recurrent sublayer {} holds {} and {} but was asked for {} and {}", next_recurrent_ - 1,
                held.first.str(), held.second.str(), shape_str(conv_window), shape_str(state));
  return held;
}

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask, double scale,
                         const ops::AttentionVariant& variant, KvCache* cache) {
  if (!cache) return ops::causal_attention_forward(q, k, v, mask, scale, variant);
  const auto [keys, values] = cache->append(k, v);
  return ops::causal_attention_forward(q, keys, values, cache->mask(), scale, variant);
}

}  // namespace moetune::model
