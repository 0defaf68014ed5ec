#include <algorithm>
#include <cmath>
#include <numeric>

#include "moetune/ops/router.h"

namespace moetune::ops {

namespace {

// Appends one token's k choices and their weights: the softmax over only their logits. The shift by the largest
// chosen logit keeps exp in range (the forward's first choice is that logit, so both callers compute the same bits).
void append_chosen_softmax(Routing& routing, const float* l, const int32_t* chosen, int64_t top_k,
                           std::vector<float>& exps) {
  float largest = l[chosen[0]];
  for (int64_t j = 1; j < top_k; ++j) largest = std::max(largest, l[chosen[j]]);
  float total = 0.0f;
  for (int64_t j = 0; j < top_k; ++j) total += (exps[size_t(j)] = std::exp(l[chosen[j]] - largest));
  for (int64_t j = 0; j < top_k; ++j) {
    routing.expert.push_back(chosen[j]);
    routing.weight.push_back(exps[size_t(j)] / total);
  }
}

}  // namespace

Routing router_topk_then_softmax_forward(const Tensor& logits, int64_t top_k) {
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  MOETUNE_CHECK(top_k >= 1 && top_k <= experts, "router: top-{} of {} experts", top_k, experts);
  Routing routing{logits, {}, {}, top_k, false};
  std::vector<int32_t> order(static_cast<size_t>(experts));
  std::vector<float> exps(static_cast<size_t>(top_k));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = logits.data<float>() + t * experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
    append_chosen_softmax(routing, l, order.data(), top_k, exps);
  }
  return routing;
}

Routing router_topk_then_softmax_weigh(const Tensor& logits, const std::vector<int32_t>& chosen, int64_t top_k) {
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  MOETUNE_CHECK(top_k >= 1 && int64_t(chosen.size()) == tokens * top_k,
                "router_topk_then_softmax_weigh: {} choices for {} tokens x top-{}", chosen.size(), tokens, top_k);
  for (const int32_t e : chosen)
    MOETUNE_CHECK(e >= 0 && e < experts, "router_topk_then_softmax_weigh: expert {} of {}", e, experts);
  Routing routing{logits, {}, {}, top_k, false};
  std::vector<float> exps(static_cast<size_t>(top_k));
  for (int64_t t = 0; t < tokens; ++t)
    append_chosen_softmax(routing, logits.data<float>() + t * experts, chosen.data() + t * top_k, top_k, exps);
  return routing;
}

Tensor router_topk_then_softmax_backward(const Routing& routing, const std::vector<float>& dweight) {
  const int64_t tokens = routing.logits.size(0), experts = routing.logits.size(1), k = routing.top_k;
  Tensor dlogits = Tensor::zeros(routing.logits.shape(), DType::F32);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* w = routing.weight.data() + t * k;
    const float* dw = dweight.data() + t * k;
    // softmax backward over the k chosen: dl_j = w_j (dw_j - Σ_i w_i dw_i).
    float dot = 0.0f;
    for (int64_t j = 0; j < k; ++j) dot += w[j] * dw[j];
    float* dl = dlogits.data<float>() + t * experts;
    for (int64_t j = 0; j < k; ++j) dl[routing.expert[size_t(t * k + j)]] = w[j] * (dw[j] - dot);
  }
  return dlogits;
}

}  // namespace moetune::ops
