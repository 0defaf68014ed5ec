// The Qwen3-MoE router and its load-balancing loss, as transformers computes them: softmax over the experts in
// fp32, top-k, optional renormalisation (norm_topk_prob), and Switch-style aux loss over all layers' logits.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops {

struct Routing {
  Tensor logits;                // [T, E], x · W_routerᵀ
  std::vector<int32_t> expert;  // [T * k], token t's choices, most probable first
  std::vector<float> weight;    // [T * k], the combine weights
  int64_t top_k = 0;
  bool normalized = false;
  float scaling = 1.0f;  // the weights' factor after any renormalisation (routed_scaling_factor)
};

// DeepSeek-V2's additions to the softmax top-k router (DeepseekV2TopkRouter): with topk_method
// group_limited_greedy, the experts split into num_groups equal groups, each scored by its most probable expert,
// and only the topk_groups best groups' experts may be chosen; every weight is then multiplied by `scaling`.
// ERNIE 4.5's (Ernie4_5_MoeTopKRouter): the k experts of the largest p + choice_bias (its moe_statics'
// e_score_correction_bias, F32 [E], on the device the router runs on), weighted by p alone; one group only.
struct SoftmaxTopkOptions {
  int64_t num_groups = 1, topk_groups = 1;
  float scaling = 1.0f;
  Tensor choice_bias;  // undefined: choose by p
};

// Top-k of the softmax (within the kept groups, or of p + choice_bias); ties go to the lower expert (and group) index.
Routing router_topk_forward(const Tensor& logits, int64_t top_k, bool normalize,
                            const SoftmaxTopkOptions& options = {});

// router_topk_forward with each token's k experts given (chosen [T * k], in pick order) instead of chosen here:
// the weights it would give them. For tests that force one engine's choices on another.
Routing router_topk_weigh(const Tensor& logits, const std::vector<int32_t>& chosen, int64_t top_k, bool normalize,
                          const SoftmaxTopkOptions& options = {});

// Given d(weight) [T * k]: returns d(logits) [T, E] through the scaling, the renormalisation and the softmax (the
// group limit chooses; it has no gradient).
Tensor router_topk_backward(const Routing& routing, const std::vector<float>& dweight);

// GPT-OSS's router (GptOssTopKRouter): top-k of the raw logits, largest first (ties to the lower expert index),
// then the weights are the softmax over only those k logits.
Routing router_topk_then_softmax_forward(const Tensor& logits, int64_t top_k);
// The same weights for given choices (chosen [T * k], each token's k experts in the order they take): what the forward
// gives them, bit for bit, where they are its own; for tests that force one engine's choices on another.
Routing router_topk_then_softmax_weigh(const Tensor& logits, const std::vector<int32_t>& chosen, int64_t top_k);
// Given d(weight) [T * k]: returns d(logits) [T, E], zero outside each token's k chosen experts.
Tensor router_topk_then_softmax_backward(const Routing& routing, const std::vector<float>& dweight);

// load_balancing_loss_func: with N the counted rows over all layers, C_e how often expert e is in a top-k and
// P_e the sum of its probabilities, loss = E · Σ_e (C_e / N) · (P_e / N). `token_valid` (per token, empty for
// all) excludes padding from both sums.
double aux_loss_value(const std::vector<Routing>& layers, const std::vector<uint8_t>& token_valid);

// Adds scale · d(loss)/d(logits) into each layer's `dlogits` [T, E]. The top-k counts are constants.
void aux_loss_backward(const std::vector<Routing>& layers, const std::vector<uint8_t>& token_valid,
                                  double scale, std::vector<Tensor>& dlogits);

// How evenly a layer spreads its tokens, for the training log: per-expert load (choices) relative to the mean,
// and the mean entropy of the routing distribution in nats (log E when uniform). Routing is dropless, so no
// token is ever dropped; the count is reported to make that visible.
struct RouterStats {
  double load_max_over_mean = 0, load_min_over_mean = 0;
  double entropy = 0;
  int64_t dropped = 0;
};
RouterStats router_stats(const Routing& routing, const std::vector<uint8_t>& token_valid);

}  // namespace moetune::ops
