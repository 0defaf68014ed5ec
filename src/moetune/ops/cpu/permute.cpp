#include "moetune/ops/permute.h"

#include <algorithm>

namespace moetune::ops {

ExpertPermutation plan_permutation(const Routing& routing, int64_t num_experts) {
  const int64_t choices = int64_t(routing.expert.size()), k = routing.top_k;
  ExpertPermutation plan{std::vector<int64_t>(size_t(num_experts + 1), 0), std::vector<int64_t>(size_t(choices)),
                         std::vector<int64_t>(size_t(choices))};
  for (int32_t e : routing.expert) {
    MOETUNE_CHECK(e >= 0 && e < num_experts, "permutation: expert {} of {}", e, num_experts);
    ++plan.offsets[size_t(e) + 1];
  }
  for (int64_t e = 0; e < num_experts; ++e) plan.offsets[size_t(e + 1)] += plan.offsets[size_t(e)];
  std::vector<int64_t> next(plan.offsets.begin(), plan.offsets.end() - 1);
  for (int64_t i = 0; i < choices; ++i) {
    const int64_t row = next[size_t(routing.expert[size_t(i)])]++;
    plan.row_of[size_t(i)] = row;
    plan.source[size_t(row)] = i / k;
  }
  return plan;
}

Tensor permute_tokens(const Tensor& x, const ExpertPermutation& plan) {
  const int64_t hidden = x.size(1), rows = int64_t(plan.source.size());
  Tensor permuted = Tensor::empty({rows, hidden}, DType::F32);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(x.data<float>() + plan.source[size_t(r)] * hidden, hidden, permuted.data<float>() + r * hidden);
  return permuted;
}

Tensor permute_tokens_backward(const Tensor& dpermuted, const ExpertPermutation& plan, int64_t tokens) {
  const int64_t hidden = dpermuted.size(1);
  Tensor dx = Tensor::zeros({tokens, hidden}, DType::F32);
  for (int64_t r = 0; r < int64_t(plan.source.size()); ++r) {
    float* dst = dx.data<float>() + plan.source[size_t(r)] * hidden;
    const float* src = dpermuted.data<float>() + r * hidden;
    for (int64_t i = 0; i < hidden; ++i) dst[i] += src[i];
  }
  return dx;
}

Tensor combine_experts(const Tensor& expert_out, const ExpertPermutation& plan, const Routing& routing) {
  const int64_t hidden = expert_out.size(1), k = routing.top_k, tokens = int64_t(plan.row_of.size()) / k;
  Tensor out = Tensor::zeros({tokens, hidden}, DType::F32);
  for (int64_t i = 0; i < tokens * k; ++i) {
    const float weight = routing.weight[size_t(i)];
    const float* src = expert_out.data<float>() + plan.row_of[size_t(i)] * hidden;
    float* dst = out.data<float>() + (i / k) * hidden;
    for (int64_t h = 0; h < hidden; ++h) dst[h] += weight * src[h];
  }
  return out;
}

CombineGrads combine_experts_backward(const Tensor& dout, const Tensor& expert_out, const ExpertPermutation& plan,
                                      const Routing& routing) {
  const int64_t hidden = expert_out.size(1), k = routing.top_k, choices = int64_t(plan.row_of.size());
  CombineGrads grads{Tensor::empty(expert_out.shape(), DType::F32), std::vector<float>(size_t(choices))};
  for (int64_t i = 0; i < choices; ++i) {
    const int64_t row = plan.row_of[size_t(i)];
    const float* d = dout.data<float>() + (i / k) * hidden;
    const float* y = expert_out.data<float>() + row * hidden;
    float* dy = grads.dexpert_out.data<float>() + row * hidden;
    float dot = 0.0f;
    for (int64_t h = 0; h < hidden; ++h) {
      dy[h] = routing.weight[size_t(i)] * d[h];
      dot += d[h] * y[h];
    }
    grads.dweight[size_t(i)] = dot;
  }
  return grads;
}

}  // namespace moetune::ops
