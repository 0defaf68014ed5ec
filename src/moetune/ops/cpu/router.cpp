#include <algorithm>
#include <cmath>
#include <numeric>

#include "moetune/ops/router.h"

namespace moetune::ops {
namespace {

void softmax_row(const float* logits, int64_t width, float* probs) {
  const float max_logit = *std::max_element(logits, logits + width);
  float total = 0.0f;
  for (int64_t e = 0; e < width; ++e) total += (probs[e] = std::exp(logits[e] - max_logit));
  for (int64_t e = 0; e < width; ++e) probs[e] /= total;
}

Tensor softmax(const Tensor& logits) {
  Tensor probs = Tensor::empty(logits.shape(), DType::F32);
  const int64_t width = logits.size(1);
  for (int64_t t = 0; t < logits.size(0); ++t)
    softmax_row(logits.data<float>() + t * width, width, probs.data<float>() + t * width);
  return probs;
}

bool counted(const std::vector<uint8_t>& token_valid, int64_t t) { return token_valid.empty() || token_valid[size_t(t)]; }

// The experts a token may choose: all, or those of the `topk_groups` groups whose most probable expert ranks
// highest (ties to the lower group), as group_limited_greedy masks the others' scores to 0 before its top-k.
std::vector<uint8_t> allowed_experts(const float* p, int64_t experts, const SoftmaxTopkOptions& o) {
  std::vector<uint8_t> allowed(static_cast<size_t>(experts), 1);
  if (o.num_groups <= 1 || o.topk_groups >= o.num_groups) return allowed;
  const int64_t size = experts / o.num_groups;
  std::vector<float> best(static_cast<size_t>(o.num_groups));
  for (int64_t g = 0; g < o.num_groups; ++g) best[size_t(g)] = *std::max_element(p + g * size, p + (g + 1) * size);
  std::vector<int64_t> groups(static_cast<size_t>(o.num_groups));
  std::iota(groups.begin(), groups.end(), 0);
  std::partial_sort(groups.begin(), groups.begin() + o.topk_groups, groups.end(), [&](int64_t a, int64_t b) {
    return best[size_t(a)] != best[size_t(b)] ? best[size_t(a)] > best[size_t(b)] : a < b;
  });
  std::fill(allowed.begin(), allowed.end(), 0);
  for (int64_t i = 0; i < o.topk_groups; ++i) std::fill_n(allowed.begin() + groups[size_t(i)] * size, size, 1);
  return allowed;
}

}  // namespace

// Token t's weights for its k experts `chosen`: their probabilities (over their sum in pick order when
// `normalize`), times the scaling.
void append_weights(Routing& routing, const float* p, const int32_t* chosen, bool normalize, float scaling) {
  float total = 0.0f;
  for (int64_t j = 0; j < routing.top_k; ++j) total += p[chosen[j]];
  for (int64_t j = 0; j < routing.top_k; ++j) {
    routing.expert.push_back(chosen[j]);
    routing.weight.push_back((normalize ? p[chosen[j]] / total : p[chosen[j]]) * scaling);
  }
}

Routing router_topk_forward(const Tensor& logits, int64_t top_k, bool normalize, const SoftmaxTopkOptions& options) {
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  MOETUNE_CHECK(top_k >= 1 && top_k <= experts, "router: top-{} of {} experts", top_k, experts);
  MOETUNE_CHECK(options.num_groups >= 1 && experts % options.num_groups == 0 && options.topk_groups >= 1 &&
                    options.topk_groups <= options.num_groups &&
                    top_k <= options.topk_groups * (experts / options.num_groups),
                "router: top-{} of {} experts in the best {} of {} groups", top_k, experts, options.topk_groups,
                options.num_groups);
  const Tensor& bias = options.choice_bias;
  MOETUNE_CHECK(!bias.defined() || (bias.dtype() == DType::F32 && bias.numel() == experts && options.num_groups == 1),
                "router: a choice bias must be F32 [{}] with one group, got {} with {} groups", experts,
                bias.defined() ? bias.str() : "", options.num_groups);
  Routing routing{logits, {}, {}, top_k, normalize, options.scaling};
  const Tensor probs = softmax(logits);
  std::vector<int32_t> order(static_cast<size_t>(experts));
  std::vector<float> score(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* p = probs.data<float>() + t * experts;
    const std::vector<uint8_t> allowed = allowed_experts(p, experts, options);
    for (int64_t e = 0; e < experts; ++e) score[size_t(e)] = bias.defined() ? p[e] + bias.data<float>()[e] : p[e];
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      if (allowed[size_t(a)] != allowed[size_t(b)]) return allowed[size_t(a)] > allowed[size_t(b)];
      return score[size_t(a)] != score[size_t(b)] ? score[size_t(a)] > score[size_t(b)] : a < b;
    });
    append_weights(routing, p, order.data(), normalize, options.scaling);
  }
  return routing;
}

Routing router_topk_weigh(const Tensor& logits, const std::vector<int32_t>& chosen, int64_t top_k, bool normalize,
                          const SoftmaxTopkOptions& options) {
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  MOETUNE_CHECK(int64_t(chosen.size()) == tokens * top_k, "router_topk_weigh: {} choices for {} tokens x top-{}",
                chosen.size(), tokens, top_k);
  for (const int32_t e : chosen) MOETUNE_CHECK(e >= 0 && e < experts, "router_topk_weigh: expert {} of {}", e, experts);
  Routing routing{logits, {}, {}, top_k, normalize, options.scaling};
  const Tensor probs = softmax(logits);
  for (int64_t t = 0; t < tokens; ++t)
    append_weights(routing, probs.data<float>() + t * experts, chosen.data() + t * top_k, normalize, options.scaling);
  return routing;
}

Tensor router_topk_backward(const Routing& routing, const std::vector<float>& dweight) {
  const int64_t tokens = routing.logits.size(0), experts = routing.logits.size(1), k = routing.top_k;
  const Tensor probs = softmax(routing.logits);
  Tensor dlogits = Tensor::zeros(routing.logits.shape(), DType::F32);
  std::vector<float> dprobs(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* p = probs.data<float>() + t * experts;
    const float* w = routing.weight.data() + t * k;
    const float* dw = dweight.data() + t * k;
    std::fill(dprobs.begin(), dprobs.end(), 0.0f);
    const float s = routing.scaling;
    if (routing.normalized) {
      // w_j = s · p_j / S with S = Σ_i p_i over the chosen: dp_j = (s · dw_j - Σ_i dw_i w_i) / S.
      float chosen = 0.0f, weighted = 0.0f;
      for (int64_t j = 0; j < k; ++j) chosen += p[routing.expert[size_t(t * k + j)]];
      for (int64_t j = 0; j < k; ++j) weighted += dw[j] * w[j];
      for (int64_t j = 0; j < k; ++j)
        dprobs[size_t(routing.expert[size_t(t * k + j)])] = (s * dw[j] - weighted) / chosen;
    } else {
      for (int64_t j = 0; j < k; ++j) dprobs[size_t(routing.expert[size_t(t * k + j)])] = s * dw[j];
    }
    // softmax backward: dl = p ⊙ (dp - ⟨p, dp⟩).
    float dot = 0.0f;
    for (int64_t e = 0; e < experts; ++e) dot += p[e] * dprobs[size_t(e)];
    float* dl = dlogits.data<float>() + t * experts;
    for (int64_t e = 0; e < experts; ++e) dl[e] = p[e] * (dprobs[size_t(e)] - dot);
  }
  return dlogits;
}

namespace {

// The per-expert sums the loss is built from: selection counts C_e, probability sums P_e, counted rows N.
struct BalanceSums {
  std::vector<double> selections, probabilities;
  double rows = 0;
};

BalanceSums balance_sums(const std::vector<Routing>& layers, const std::vector<uint8_t>& token_valid) {
  const int64_t experts = layers.front().logits.size(1);
  BalanceSums sums{std::vector<double>(size_t(experts)), std::vector<double>(size_t(experts)), 0};
  for (const Routing& layer : layers) {
    const Tensor probs = softmax(layer.logits);
    for (int64_t t = 0; t < layer.logits.size(0); ++t) {
      if (!counted(token_valid, t)) continue;
      sums.rows += 1;
      for (int64_t j = 0; j < layer.top_k; ++j) sums.selections[size_t(layer.expert[size_t(t * layer.top_k + j)])] += 1;
      for (int64_t e = 0; e < experts; ++e) sums.probabilities[size_t(e)] += probs.data<float>()[t * experts + e];
    }
  }
  return sums;
}

}  // namespace

double aux_loss_value(const std::vector<Routing>& layers, const std::vector<uint8_t>& token_valid) {
  if (layers.empty()) return 0.0;
  const BalanceSums sums = balance_sums(layers, token_valid);
  if (sums.rows == 0) return 0.0;
  double loss = 0;
  for (size_t e = 0; e < sums.selections.size(); ++e) loss += sums.selections[e] * sums.probabilities[e];
  return loss * double(sums.selections.size()) / (sums.rows * sums.rows);
}

void aux_loss_backward(const std::vector<Routing>& layers, const std::vector<uint8_t>& token_valid,
                                  double scale, std::vector<Tensor>& dlogits) {
  if (layers.empty()) return;
  const BalanceSums sums = balance_sums(layers, token_valid);
  if (sums.rows == 0) return;
  const int64_t experts = int64_t(sums.selections.size());
  // d loss / d p[n, e] = E · C_e / N² for every counted row; then through each row's softmax.
  std::vector<float> dprobs(static_cast<size_t>(experts));
  for (int64_t e = 0; e < experts; ++e)
    dprobs[size_t(e)] = float(scale * double(experts) * sums.selections[size_t(e)] / (sums.rows * sums.rows));
  for (size_t l = 0; l < layers.size(); ++l) {
    const Tensor probs = softmax(layers[l].logits);
    for (int64_t t = 0; t < probs.size(0); ++t) {
      if (!counted(token_valid, t)) continue;
      const float* p = probs.data<float>() + t * experts;
      float dot = 0.0f;
      for (int64_t e = 0; e < experts; ++e) dot += p[e] * dprobs[size_t(e)];
      float* dl = dlogits[l].data<float>() + t * experts;
      for (int64_t e = 0; e < experts; ++e) dl[e] += p[e] * (dprobs[size_t(e)] - dot);
    }
  }
}

RouterStats router_stats(const Routing& routing, const std::vector<uint8_t>& token_valid) {
  const int64_t tokens = routing.logits.size(0), experts = routing.logits.size(1);
  const Tensor probs = softmax(routing.logits);
  std::vector<double> load(static_cast<size_t>(experts), 0.0);
  double entropy = 0, counted_tokens = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    if (!counted(token_valid, t)) continue;
    counted_tokens += 1;
    for (int64_t j = 0; j < routing.top_k; ++j) load[size_t(routing.expert[size_t(t * routing.top_k + j)])] += 1;
    for (int64_t e = 0; e < experts; ++e) {
      const double p = probs.data<float>()[t * experts + e];
      if (p > 0) entropy -= p * std::log(p);
    }
  }
  RouterStats stats;
  if (counted_tokens == 0) return stats;
  const double mean = counted_tokens * double(routing.top_k) / double(experts);
  stats.load_max_over_mean = *std::max_element(load.begin(), load.end()) / mean;
  stats.load_min_over_mean = *std::min_element(load.begin(), load.end()) / mean;
  stats.entropy = entropy / counted_tokens;
  return stats;
}

}  // namespace moetune::ops
