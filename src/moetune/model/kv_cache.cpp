#include "moetune/model/kv_cache.h"

#include <cstring>

namespace moetune::model {
namespace {

// [a; b] along the first dimension (tokens).
Tensor concatenate_tokens(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b.clone();
  Shape shape = a.shape();
  shape[0] += b.size(0);
  Tensor out = Tensor::empty(shape, DType::F32);
  std::memcpy(out.data<float>(), a.data<float>(), size_t(a.numel()) * sizeof(float));
  std::memcpy(out.data<float>() + a.numel(), b.data<float>(), size_t(b.numel()) * sizeof(float));
  return out;
}

}  // namespace

std::pair<Tensor, Tensor> KvCache::append(const Tensor& k, const Tensor& v) {
  MOETUNE_CHECK(k.size(0) == pending_ && v.size(0) == pending_, "KvCache: {} new keys in a pass of {} tokens", k.size(0),
                pending_);
  if (next_ == layers_.size()) layers_.emplace_back();
  auto& [keys, values] = layers_[next_++];
  MOETUNE_CHECK(!keys.defined() || keys.size(0) == tokens_, "KvCache: a sublayer holds {} keys of {} tokens",
                keys.size(0), tokens_);
  // Copied whole each step: O(sequence) per token, as the attention itself is; the CPU engine runs small models.
  keys = concatenate_tokens(keys, k);
  values = concatenate_tokens(values, v);
  return {keys, values};
}

Tensor KvCache::append_inputs(const Tensor& x) {
  MOETUNE_CHECK(x.size(0) == pending_, "KvCache: {} new rows in a pass of {} tokens", x.size(0), pending_);
  if (next_inputs_ == inputs_.size()) inputs_.emplace_back();
  Tensor& rows = inputs_[next_inputs_++];
  MOETUNE_CHECK(!rows.defined() || rows.size(0) == tokens_, "KvCache: a sublayer holds {} rows of {} tokens", rows.size(0),
                tokens_);
  rows = concatenate_tokens(rows, x);
  return rows;
}

Tensor attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionMask& mask, double scale,
                         const ops::AttentionVariant& variant, KvCache* cache) {
  if (!cache) return ops::causal_attention_forward(q, k, v, mask, scale, variant);
  const auto [keys, values] = cache->append(k, v);
  return ops::causal_attention_forward(q, keys, values, cache->mask(), scale, variant);
}

}  // namespace moetune::model
