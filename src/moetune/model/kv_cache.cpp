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

std::pair<Tensor, Tensor> KvCache::mamba2_state(const Shape& conv_window, const Shape& ssm_state) {
  if (next_mamba2_ == mamba2_.size()) {
    MOETUNE_CHECK(tokens_ == 0, "KvCache: a new Mamba2 sublayer after {} tokens", tokens_);
    mamba2_.emplace_back(Tensor::zeros(conv_window, DType::F32), Tensor::zeros(ssm_state, DType::F32));
  }
  const auto& state = mamba2_[next_mamba2_++];
  MOETUNE_CHECK(state.first.shape() == conv_window && state.second.shape() == ssm_state,
                "KvCache: Mamba2 sublayer {} holds {} and {} but was asked for {} and {}", next_mamba2_ - 1,
                state.first.str(), state.second.str(), shape_str(conv_window), shape_str(ssm_state));
  return state;
}

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask, double scale,
                         const ops::AttentionVariant& variant, KvCache* cache) {
  if (!cache) return ops::causal_attention_forward(q, k, v, mask, scale, variant);
  const auto [keys, values] = cache->append(k, v);
  return ops::causal_attention_forward(q, keys, values, cache->mask(), scale, variant);
}

}  // namespace moetune::model
