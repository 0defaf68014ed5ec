#include <cmath>

#include "moetune/ops/attention.h"

namespace moetune::ops {

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& document_start,
                        double scale) {
  const int64_t tokens = q.size(0), heads = q.size(1), d = q.size(2), kv_heads = k.size(1);
  MOETUNE_CHECK(heads % kv_heads == 0 && k.shape() == v.shape() && k.size(0) == tokens && k.size(2) == d,
                "causal_attention: q {}, k {}, v {}", q.str(), k.str(), v.str());
  const int64_t group = heads / kv_heads;
  Tensor out = Tensor::zeros({tokens, heads, d}, DType::F32);
  const float *qd = q.data<float>(), *kd = k.data<float>(), *vd = v.data<float>();
  float* od = out.data<float>();
  std::vector<float> scores(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t first = document_start[size_t(t)];
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kv = h / group;
      const float* qv = qd + (t * heads + h) * d;
      float max_score = -INFINITY;
      for (int64_t j = first; j <= t; ++j) {
        const float* kv_row = kd + (j * kv_heads + kv) * d;
        float dot = 0.0f;
        for (int64_t i = 0; i < d; ++i) dot += qv[i] * kv_row[i];
        scores[size_t(j)] = dot * float(scale);
        max_score = std::max(max_score, scores[size_t(j)]);
      }
      float total = 0.0f;
      for (int64_t j = first; j <= t; ++j) total += (scores[size_t(j)] = std::exp(scores[size_t(j)] - max_score));
      float* o = od + (t * heads + h) * d;
      for (int64_t j = first; j <= t; ++j) {
        const float p = scores[size_t(j)] / total;
        const float* vv = vd + (j * kv_heads + kv) * d;
        for (int64_t i = 0; i < d; ++i) o[i] += p * vv[i];
      }
    }
  }
  return out;
}

}  // namespace moetune::ops
