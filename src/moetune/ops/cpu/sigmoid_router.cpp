#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "moetune/ops/sigmoid_router.h"

namespace moetune::ops {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void check(const Tensor& logits, const GroupLimitedRouter& r) {
  const int64_t experts = logits.size(1);
  MOETUNE_CHECK(r.num_groups >= 1 && experts % r.num_groups == 0 && experts / r.num_groups >= 2 &&
                    r.topk_groups >= 1 && r.topk_groups <= r.num_groups && r.top_k >= 1 &&
                    r.top_k <= r.topk_groups * (experts / r.num_groups),
                "sigmoid_router: {} experts in {} groups, top-{} groups, top-{} experts", experts, r.num_groups,
                r.topk_groups, r.top_k);
}

// The indices of the `k` largest of values[0..n), largest first, ties to the lower index.
std::vector<int32_t> top_indices(const float* values, int64_t n, int64_t k) {
  std::vector<int32_t> order(static_cast<size_t>(n), 0);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return values[a] != values[b] ? values[a] > values[b] : a < b; });
  order.resize(size_t(k));
  return order;
}

// One token's k choices and their combine weights: the unbiased scores, renormalised when asked, scaled.
void append_choice(Routing& routing, const std::vector<float>& scores, const int32_t* chosen, const GroupLimitedRouter& r) {
  float total = 0.0f;
  for (int64_t j = 0; j < r.top_k; ++j) total += scores[size_t(chosen[j])];
  const float denominator = total + 1e-20f;
  for (int64_t j = 0; j < r.top_k; ++j) {
    const int32_t e = chosen[j];
    routing.expert.push_back(e);
    const float w = r.renormalize ? scores[size_t(e)] / denominator : scores[size_t(e)];
    routing.weight.push_back(w * float(r.scaling_factor));
  }
}

}  // namespace

Routing sigmoid_router_forward(const Tensor& logits, const Tensor& correction_bias, const GroupLimitedRouter& r) {
  check(logits, r);
  const int64_t tokens = logits.size(0), experts = logits.size(1), group_size = experts / r.num_groups, k = r.top_k;
  MOETUNE_CHECK(!correction_bias.defined() || correction_bias.numel() == experts, "sigmoid_router: bias {} for {} experts",
                correction_bias.str(), experts);
  Routing routing{logits, {}, {}, k, r.renormalize};
  routing.expert.reserve(size_t(tokens * k));
  routing.weight.reserve(size_t(tokens * k));
  std::vector<float> scores(static_cast<size_t>(experts)), choice(static_cast<size_t>(experts));
  std::vector<float> group_score(static_cast<size_t>(r.num_groups));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data<float>() + t * experts;
    for (int64_t e = 0; e < experts; ++e) {
      scores[size_t(e)] = sigmoid(row[e]);
      choice[size_t(e)] = scores[size_t(e)] + (correction_bias.defined() ? correction_bias.data<float>()[e] : 0.0f);
    }
    for (int64_t g = 0; g < r.num_groups; ++g) {
      const std::vector<int32_t> best = top_indices(choice.data() + g * group_size, group_size, 2);
      group_score[size_t(g)] = choice[size_t(g * group_size + best[0])] + choice[size_t(g * group_size + best[1])];
    }
    // Experts outside the kept groups cannot be chosen.
    std::vector<float> masked(static_cast<size_t>(experts), -std::numeric_limits<float>::infinity());
    for (int32_t g : top_indices(group_score.data(), r.num_groups, r.topk_groups))
      std::copy_n(choice.begin() + g * group_size, group_size, masked.begin() + g * group_size);
    append_choice(routing, scores, top_indices(masked.data(), experts, k).data(), r);
  }
  return routing;
}

Routing sigmoid_router_weigh(const Tensor& logits, const std::vector<int32_t>& chosen, const GroupLimitedRouter& r) {
  check(logits, r);
  const int64_t tokens = logits.size(0), experts = logits.size(1), k = r.top_k;
  MOETUNE_CHECK(int64_t(chosen.size()) == tokens * k, "sigmoid_router_weigh: {} choices for {} tokens x top-{}",
                chosen.size(), tokens, k);
  Routing routing{logits, {}, {}, k, r.renormalize};
  std::vector<float> scores(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits.data<float>() + t * experts;
    for (int64_t e = 0; e < experts; ++e) scores[size_t(e)] = sigmoid(row[e]);
    for (int64_t j = 0; j < k; ++j)
      MOETUNE_CHECK(chosen[size_t(t * k + j)] >= 0 && chosen[size_t(t * k + j)] < experts,
                    "sigmoid_router_weigh: token {} chose expert {} of {}", t, chosen[size_t(t * k + j)], experts);
    append_choice(routing, scores, chosen.data() + t * k, r);
  }
  return routing;
}

Tensor sigmoid_router_backward(const Routing& routing, const std::vector<float>& dweight, const GroupLimitedRouter& r) {
  const int64_t tokens = routing.logits.size(0), experts = routing.logits.size(1), k = routing.top_k;
  MOETUNE_CHECK(int64_t(dweight.size()) == tokens * k, "sigmoid_router_backward: {} weight gradients for {} x {}",
                dweight.size(), tokens, k);
  Tensor dlogits = Tensor::zeros(routing.logits.shape(), DType::F32);
  const float scaling = float(r.scaling_factor);
  std::vector<float> s(static_cast<size_t>(k)), ds(static_cast<size_t>(k));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = routing.logits.data<float>() + t * experts;
    const int32_t* chosen = routing.expert.data() + t * k;
    const float* dw = dweight.data() + t * k;
    float total = 0.0f;
    for (int64_t j = 0; j < k; ++j) total += (s[size_t(j)] = sigmoid(row[chosen[j]]));
    if (r.renormalize) {
      // w_j = c · s_j / D with D = Σ s + 1e-20: ds_j = c · (dw_j - Σ_i dw_i s_i / D) / D.
      const float denominator = total + 1e-20f;
      float weighted = 0.0f;
      for (int64_t j = 0; j < k; ++j) weighted += dw[j] * s[size_t(j)];
      for (int64_t j = 0; j < k; ++j) ds[size_t(j)] = scaling * (dw[j] - weighted / denominator) / denominator;
    } else {
      for (int64_t j = 0; j < k; ++j) ds[size_t(j)] = scaling * dw[j];
    }
    float* dl = dlogits.data<float>() + t * experts;
    for (int64_t j = 0; j < k; ++j) dl[chosen[j]] += ds[size_t(j)] * s[size_t(j)] * (1.0f - s[size_t(j)]);
  }
  return dlogits;
}

}  // namespace moetune::ops
