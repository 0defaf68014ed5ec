#include <algorithm>
#include <cmath>

#include "moetune/ops/attention.h"

namespace moetune::ops {
namespace {

struct Shapes {
  int64_t tokens, heads, kv_heads, d, group;
  int64_t past;  // keys before the first query (a KV cache's); query t sits at key index past + t
};

Shapes check(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  const int64_t tokens = q.size(0), heads = q.size(1), d = q.size(2), kv_heads = k.size(1), keys = k.size(0);
  MOETUNE_CHECK(heads % kv_heads == 0 && k.shape() == v.shape() && keys >= tokens && k.size(2) == d &&
                    int64_t(mask.document_start.size()) == keys &&
                    (mask.key_valid.empty() || int64_t(mask.key_valid.size()) == keys),
                "causal_attention: q {}, k {}, v {}, mask of {} tokens", q.str(), k.str(), v.str(),
                mask.document_start.size());
  return {tokens, heads, kv_heads, d, heads / kv_heads, keys - tokens};
}

// The first key query t may see: its document's first token, or the window's when the layer slides.
int64_t first_key(int64_t t, const AttentionMask& mask, const AttentionVariant& variant) {
  const int64_t start = mask.document_start[size_t(t)];
  return variant.sliding_window ? std::max(start, t - *variant.sliding_window + 1) : start;
}

// Softmax probabilities of query (t, h) over keys [first, t] into `p` (indexed by key), with the head's sink logit
// (if any) in the denominator; `sink_probability` gets the sink's share. Returns false when no key is visible.
bool probabilities(const float* q_row, const float* k, const Shapes& s, int64_t t, int64_t h, int64_t first,
                   const AttentionMask& mask, const AttentionVariant& variant, double scale, std::vector<float>& p,
                   float& sink_probability) {
  const int64_t kv = h / s.group;
  float max_score = -INFINITY;
  bool any_visible = false;  // not max_score == -inf: std::max drops NaN scores, and a NaN row must stay NaN
  for (int64_t j = first; j <= t; ++j) {
    if (!mask.key_valid.empty() && !mask.key_valid[size_t(j)]) continue;
    any_visible = true;
    const float* k_row = k + (j * s.kv_heads + kv) * s.d;
    float dot = 0.0f;
    for (int64_t i = 0; i < s.d; ++i) dot += q_row[i] * k_row[i];
    p[size_t(j)] = dot * float(scale);
    max_score = std::max(max_score, p[size_t(j)]);
  }
  if (!any_visible) return false;
  const bool sinks = variant.sinks.defined();
  const float sink_logit = sinks ? variant.sinks.data<float>()[h] : 0.0f;
  if (sinks) max_score = std::max(max_score, sink_logit);
  float total = sinks ? (sink_probability = std::exp(sink_logit - max_score)) : 0.0f;
  for (int64_t j = first; j <= t; ++j)
    if (mask.key_valid.empty() || mask.key_valid[size_t(j)]) total += (p[size_t(j)] = std::exp(p[size_t(j)] - max_score));
  for (int64_t j = first; j <= t; ++j)
    p[size_t(j)] = (mask.key_valid.empty() || mask.key_valid[size_t(j)]) ? p[size_t(j)] / total : 0.0f;
  sink_probability = sinks ? sink_probability / total : 0.0f;
  return true;
}

void check_variant(const AttentionVariant& variant, const Shapes& s) {
  MOETUNE_CHECK(!variant.sliding_window || *variant.sliding_window > 0, "causal_attention: sliding window {}",
                *variant.sliding_window);
  MOETUNE_CHECK(!variant.sinks.defined() || (variant.sinks.numel() == s.heads && variant.sinks.dtype() == DType::F32),
                "causal_attention: sinks {} for {} heads", variant.sinks.str(), s.heads);
}

}  // namespace

Tensor causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale,
                                const AttentionVariant& variant) {
  const Shapes s = check(q, k, v, mask);
  check_variant(variant, s);
  Tensor out = Tensor::zeros({s.tokens, s.heads, s.d}, DType::F32);
  // Each query token writes only its own output rows.
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t at = s.past + t;  // the query's own key
    std::vector<float> p(static_cast<size_t>(at + 1));
    const int64_t first = first_key(at, mask, variant);
    float sink_probability = 0.0f;
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t kv = h / s.group;
      if (!probabilities(q.data<float>() + (t * s.heads + h) * s.d, k.data<float>(), s, at, h, first, mask, variant, scale, p,
                         sink_probability))
        continue;
      float* o = out.data<float>() + (t * s.heads + h) * s.d;
      for (int64_t j = first; j <= at; ++j) {
        const float* v_row = v.data<float>() + (j * s.kv_heads + kv) * s.d;
        for (int64_t i = 0; i < s.d; ++i) o[i] += p[size_t(j)] * v_row[i];
      }
    }
  }
  return out;
}

AttentionGrads causal_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const AttentionMask& mask, double scale,
                                         const AttentionVariant& variant) {
  const Shapes s = check(q, k, v, mask);
  MOETUNE_CHECK(s.past == 0, "causal_attention_backward: q {} and k {} hold different tokens (a KV cache is for "
                "generation only)", q.str(), k.str());
  check_variant(variant, s);
  AttentionGrads g{Tensor::zeros(q.shape(), DType::F32), Tensor::zeros(k.shape(), DType::F32),
                   Tensor::zeros(v.shape(), DType::F32), Tensor()};
  if (variant.sinks.defined()) g.dsinks = Tensor::zeros({s.heads}, DType::F32);
  // One key/value head per thread: its query heads' dq rows, its own dk, dv rows and its query heads' dsinks are
  // written by it alone.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t kv = 0; kv < s.kv_heads; ++kv) {
    std::vector<float> p(static_cast<size_t>(s.tokens));
    float sink_probability = 0.0f;
    for (int64_t t = 0; t < s.tokens; ++t)
      for (int64_t h = kv * s.group; h < (kv + 1) * s.group; ++h) {
        const int64_t row = (t * s.heads + h) * s.d, first = first_key(t, mask, variant);
        const float* q_row = q.data<float>() + row;
        if (!probabilities(q_row, k.data<float>(), s, t, h, first, mask, variant, scale, p, sink_probability)) continue;
        const float* do_row = dout.data<float>() + row;
        // softmax backward: ds_j = p_j (dp_j - Σ p dp) with Σ p dp = ⟨dO, O⟩ (the sink carries no value, so its
        // dp is 0 and it adds nothing to the sum); the sink's own logit gets p_sink (0 - ⟨dO, O⟩).
        float dot_out = 0.0f;
        for (int64_t i = 0; i < s.d; ++i) dot_out += do_row[i] * out.data<float>()[row + i];
        if (g.dsinks.defined()) g.dsinks.data<float>()[h] -= sink_probability * dot_out;
        float* dq_row = g.dq.data<float>() + row;
        for (int64_t j = first; j <= t; ++j) {
          if (p[size_t(j)] == 0.0f) continue;
          const int64_t key_row = (j * s.kv_heads + kv) * s.d;
          const float* v_row = v.data<float>() + key_row;
          const float* k_row = k.data<float>() + key_row;
          float dp = 0.0f;
          for (int64_t i = 0; i < s.d; ++i) dp += do_row[i] * v_row[i];
          const float ds = p[size_t(j)] * (dp - dot_out) * float(scale);
          float* dk_row = g.dk.data<float>() + key_row;
          float* dv_row = g.dv.data<float>() + key_row;
          for (int64_t i = 0; i < s.d; ++i) {
            dq_row[i] += ds * k_row[i];
            dk_row[i] += ds * q_row[i];
            dv_row[i] += p[size_t(j)] * do_row[i];
          }
        }
      }
  }
  return g;
}

}  // namespace moetune::ops
