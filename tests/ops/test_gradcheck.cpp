// Finite-difference checks of every CPU op's backward: for L = Σ w ⊙ f(x) with random w, each element of each
// input is nudged both ways and (L(x+h) − L(x−h)) / 2h compared with the analytic gradient. fp32 ops with
// h = 1e-2 give differences accurate to ~1e-4, so the tolerance on ‖a − b‖ / ‖b‖ is 1e-2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "gradcheck_util.h"
#include "moetune/ops/activation.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/embedding.h"
#include "moetune/ops/experts.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/loss.h"
#include "moetune/ops/norm.h"
#include "moetune/ops/permute.h"
#include "moetune/ops/rope.h"
#include "moetune/ops/router.h"

namespace moetune::ops {
namespace {

TEST(GradCheck, Linear) {
  Tensor x = random({5, 4}), w = random({3, 4}), b = random({3}), dy = random({5, 3});
  Tensor dw = Tensor::zeros({3, 4}, DType::F32), db = Tensor::zeros({3}, DType::F32);
  Tensor dx = linear_backward(dy, x, w, dw, db);
  auto loss = [&] { return weighted_sum(linear_forward(x, w, b), dy); };
  expect_gradient("dx", x, loss, dx);
  expect_gradient("dweight", w, loss, dw);
  expect_gradient("dbias", b, loss, db);
}

TEST(GradCheck, RmsNorm) {
  Tensor x = random({4, 6}), w = random({6}), dy = random({4, 6});
  Tensor dw = Tensor::zeros({6}, DType::F32);
  Tensor dx = rms_norm_backward(dy, x, w, 1e-6, dw);
  auto loss = [&] { return weighted_sum(rms_norm_forward(x, w, 1e-6), dy); };
  expect_gradient("dx", x, loss, dx);
  expect_gradient("dweight", w, loss, dw);
}

TEST(GradCheck, Rope) {
  ops::RopeSpec config;
  config.theta = 100.0;
  const std::vector<float> inv = rope_inverse_frequencies(config, 8);
  const std::vector<int64_t> positions = {0, 1, 2, 0, 1};
  Tensor x = random({5, 2, 8}), dy = random({5, 2, 8});
  Tensor dx = dy.clone();
  apply_rope(dx, inv, positions, /*inverse=*/true);
  auto loss = [&] {
    Tensor y = x.clone();
    apply_rope(y, inv, positions);
    return weighted_sum(y, dy);
  };
  expect_gradient("dx", x, loss, dx);
}

TEST(GradCheck, CausalAttentionPackedAndPadded) {
  // Two documents in one row (0-3 and 4-6), the last token padding: every masking path at once.
  AttentionMask mask{{0, 0, 0, 0, 4, 4, 4}, {1, 1, 1, 1, 1, 1, 0}};
  Tensor q = random({7, 4, 8}), k = random({7, 2, 8}), v = random({7, 2, 8}), dy = random({7, 4, 8});
  const double scale = 1.0 / std::sqrt(8.0);
  Tensor out = causal_attention_forward(q, k, v, mask, scale);
  AttentionGrads g = causal_attention_backward(dy, q, k, v, out, mask, scale);
  auto loss = [&] { return weighted_sum(causal_attention_forward(q, k, v, mask, scale), dy); };
  expect_gradient("dq", q, loss, g.dq);
  expect_gradient("dk", k, loss, g.dk);
  expect_gradient("dv", v, loss, g.dv);
}

TEST(GradCheck, YarnScaledRope) {
  ops::RopeSpec yarn{.type = "yarn", .theta = 100.0, .factor = 8.0, .original_max_position_embeddings = 16};
  const std::vector<float> inv = rope_inverse_frequencies(yarn, 8);
  const double scaling = rope_attention_scaling(yarn);
  const std::vector<int64_t> positions = {0, 1, 2, 0, 1};
  Tensor x = random({5, 2, 8}), dy = random({5, 2, 8});
  Tensor dx = dy.clone();
  apply_rope(dx, inv, positions, /*inverse=*/true, scaling);
  auto loss = [&] {
    Tensor y = x.clone();
    apply_rope(y, inv, positions, false, scaling);
    return weighted_sum(y, dy);
  };
  expect_gradient("dx", x, loss, dx);
}

TEST(GradCheck, CausalAttentionWithSlidingWindowAndSinks) {
  // Two documents in one row (0-5 and 6-8), the last token padding, a window of 3 keys, one sink per head.
  AttentionMask mask{{0, 0, 0, 0, 0, 0, 6, 6, 6}, {1, 1, 1, 1, 1, 1, 1, 1, 0}};
  Tensor q = random({9, 4, 8}), k = random({9, 2, 8}), v = random({9, 2, 8}), dy = random({9, 4, 8});
  AttentionVariant variant{3, random({4})};
  const double scale = 1.0 / std::sqrt(8.0);
  Tensor out = causal_attention_forward(q, k, v, mask, scale, variant);
  AttentionGrads g = causal_attention_backward(dy, q, k, v, out, mask, scale, variant);
  auto loss = [&] { return weighted_sum(causal_attention_forward(q, k, v, mask, scale, variant), dy); };
  expect_gradient("dq", q, loss, g.dq);
  expect_gradient("dk", k, loss, g.dk);
  expect_gradient("dv", v, loss, g.dv);
  expect_gradient("dsinks", variant.sinks, loss, g.dsinks);
}

TEST(GradCheck, Swiglu) {
  Tensor x = random({3, 10}), dy = random({3, 5});
  Tensor dx = swiglu_backward(dy, x);
  expect_gradient("dgate_up", x, [&] { return weighted_sum(swiglu_forward(x), dy); }, dx);
}

// Values well inside and well outside [-7, 7] (none within the nudge of a clamp edge): both clamps cut some.
TEST(GradCheck, ClampedSwiglu) {
  Tensor x = random({4, 12}, 6.0f), dy = random({4, 6});
  for (int64_t i = 0; i < x.numel(); ++i)
    if (std::fabs(std::fabs(x.data<float>()[i]) - 7.0f) < 0.1f) x.data<float>()[i] += 0.5f;
  x.data<float>()[0] = 9.0f;    // a gate above the limit
  x.data<float>()[6] = -8.0f;   // an up below -limit
  x.data<float>()[7] = 8.0f;    // an up above the limit
  const SwigluClamp clamp;
  Tensor dx = clamped_swiglu_backward(dy, x, clamp);
  EXPECT_EQ(dx.data<float>()[0], 0.0f);
  EXPECT_EQ(dx.data<float>()[6], 0.0f);
  EXPECT_EQ(dx.data<float>()[7], 0.0f);
  expect_gradient("dgate_up", x, [&] { return weighted_sum(clamped_swiglu_forward(x, clamp), dy); }, dx);
}

TEST(GradCheck, Embedding) {
  Tensor ids = Tensor::from_vector<int64_t>({2, 0, 2, 5}, {4});
  Tensor table = random({6, 3}), dy = random({4, 3});
  Tensor dtable = Tensor::zeros({6, 3}, DType::F32);
  embedding_backward(dy, ids, dtable);
  expect_gradient("dtable", table, [&] { return weighted_sum(embedding_forward(ids, table), dy); }, dtable);
}

// nn.Embedding(padding_idx=2): the lookups of row 2 pass nothing back; the others as before.
TEST(GradCheck, EmbeddingPaddingRowGetsNoGradient) {
  Tensor ids = Tensor::from_vector<int64_t>({2, 0, 2, 5}, {4});
  // Fixed values: the file's random() stream stays as the other checks were tuned with.
  Tensor dy = Tensor::from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f, 3.0f, -0.5f, 1.5f, 1.0f, -2.0f, 0.75f, -0.25f, 4.0f}, {4, 3});
  Tensor padded = Tensor::zeros({6, 3}, DType::F32), plain = Tensor::zeros({6, 3}, DType::F32);
  embedding_backward(dy, ids, padded, /*padding_row=*/2);
  embedding_backward(dy, ids, plain);
  for (int64_t row = 0; row < 6; ++row)
    for (int64_t i = 0; i < 3; ++i)
      EXPECT_EQ(padded.data<float>()[row * 3 + i], row == 2 ? 0.0f : plain.data<float>()[row * 3 + i]) << row;
}

TEST(GradCheck, CrossEntropy) {
  Tensor logits = random({4, 7});
  const std::vector<int64_t> targets = {3, kIgnoreIndex, 0, 6};
  Tensor dlogits = cross_entropy_backward(logits, targets, 0.5);
  expect_gradient("dlogits", logits, [&] { return 0.5 * cross_entropy(logits, targets).loss_sum; }, dlogits);
}

// The router's top-k choice is piecewise constant; logits far apart keep it fixed under the nudges.
Tensor separated_logits(int64_t tokens, int64_t experts) {
  Tensor logits = random({tokens, experts});
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < experts; ++e) logits.data<float>()[t * experts + e] += float((e * 7 + t * 3) % experts);
  return logits;
}

TEST(GradCheck, RouterWeights) {
  for (bool normalize : {false, true}) {
    Tensor logits = separated_logits(5, 6), dweights = random({5 * 2});
    const std::vector<float> dw(dweights.data<float>(), dweights.data<float>() + 10);
    Tensor dlogits = router_topk_backward(router_topk_forward(logits, 2, normalize), dw);
    auto loss = [&] {
      Routing r = router_topk_forward(logits, 2, normalize);
      return weighted_sum(Tensor::from_vector(r.weight, {10}), dweights);
    };
    expect_gradient(normalize ? "dlogits (normalized)" : "dlogits", logits, loss, dlogits);
  }
}

TEST(GradCheck, RouterTopkThenSoftmax) {
  Tensor logits = separated_logits(5, 6), dweights = random({5 * 3});
  const std::vector<float> dw(dweights.data<float>(), dweights.data<float>() + 15);
  Tensor dlogits = router_topk_then_softmax_backward(router_topk_then_softmax_forward(logits, 3), dw);
  auto loss = [&] {
    return weighted_sum(Tensor::from_vector(router_topk_then_softmax_forward(logits, 3).weight, {15}), dweights);
  };
  expect_gradient("dlogits", logits, loss, dlogits);
}

TEST(GradCheck, LoadBalancingLossWithPadding) {
  Tensor a = separated_logits(6, 4), b = separated_logits(6, 4);
  const std::vector<uint8_t> valid = {1, 1, 1, 1, 0, 1};
  auto loss = [&] {
    return 3.0 * aux_loss_value({router_topk_forward(a, 2, true), router_topk_forward(b, 2, true)}, valid);
  };
  std::vector<Tensor> grads = {Tensor::zeros({6, 4}, DType::F32), Tensor::zeros({6, 4}, DType::F32)};
  aux_loss_backward({router_topk_forward(a, 2, true), router_topk_forward(b, 2, true)}, valid, 3.0, grads);
  expect_gradient("dlogits layer 0", a, loss, grads[0]);
  expect_gradient("dlogits layer 1", b, loss, grads[1]);
}

TEST(GradCheck, PermuteExpertsCombine) {
  // 5 tokens, top-2 of 4 experts, expert 3 chosen by no one.
  const int64_t tokens = 5, hidden = 4, inner = 3, experts = 4;
  Routing routing{Tensor(), {0, 1, 1, 2, 0, 2, 1, 0, 2, 1}, {}, 2, false};
  Tensor weights = random({10}), x = random({tokens, hidden}), gate_up = random({experts, 2 * inner, hidden}, 0.5f);
  Tensor down = random({experts, hidden, inner}, 0.5f), dy = random({tokens, hidden});
  auto set_weights = [&] { routing.weight.assign(weights.data<float>(), weights.data<float>() + 10); };
  set_weights();
  const ExpertPermutation plan = plan_permutation(routing, experts);
  EXPECT_EQ(plan.offsets.back(), 10);
  EXPECT_EQ(plan.offsets[3], plan.offsets[4]);  // the unused expert owns no rows
  auto forward = [&] {
    set_weights();
    const Tensor permuted = permute_tokens(x, plan);
    return combine_experts(expert_mlp(permuted, plan.offsets, gate_up, down).out, plan, routing);
  };
  const Tensor permuted = permute_tokens(x, plan);
  const ExpertActivations activations = expert_mlp(permuted, plan.offsets, gate_up, down);
  CombineGrads combine = combine_experts_backward(dy, activations.out, plan, routing);
  Tensor dgate_up = Tensor::zeros(gate_up.shape(), DType::F32), ddown = Tensor::zeros(down.shape(), DType::F32);
  Tensor dpermuted = expert_mlp_backward(combine.dexpert_out, permuted, activations, plan.offsets, gate_up, down, dgate_up,
                                         ddown);
  Tensor dx = permute_tokens_backward(dpermuted, plan, tokens);
  auto loss = [&] { return weighted_sum(forward(), dy); };
  expect_gradient("dx", x, loss, dx);
  expect_gradient("dgate_up", gate_up, loss, dgate_up);
  expect_gradient("ddown", down, loss, ddown);
  expect_gradient("drouting_weights", weights, loss, Tensor::from_vector(combine.dweight, {10}));
}

TEST(GradCheck, ExpertsWithBiasesAndClampedSwiglu) {
  // GPT-OSS's experts: biases on both projections, the clamped SwiGLU (wide gate/up biases so the clamps cut).
  const int64_t rows = 6, hidden = 4, inner = 3, experts = 3;
  const std::vector<int64_t> offsets = {0, 2, 2, 6};  // expert 1 gets no rows
  Tensor x = random({rows, hidden}), gate_up = random({experts, 2 * inner, hidden}, 0.5f);
  Tensor down = random({experts, hidden, inner}, 0.5f), dy = random({rows, hidden});
  ExpertVariant variant{random({experts, 2 * inner}, 6.0f), random({experts, hidden}), SwigluClamp{}};
  auto forward = [&] { return expert_mlp(x, offsets, gate_up, down, variant).out; };
  const ExpertActivations activations = expert_mlp(x, offsets, gate_up, down, variant);
  for (int64_t i = 0; i < activations.gate_up.numel(); ++i)  // no pre-activation within a nudge of a clamp edge
    ASSERT_GT(std::fabs(std::fabs(activations.gate_up.data<float>()[i]) - 7.0f), 0.05f) << i;
  Tensor dgate_up = Tensor::zeros(gate_up.shape(), DType::F32), ddown = Tensor::zeros(down.shape(), DType::F32);
  ExpertBiasGrads bias_grads{Tensor::zeros({experts, 2 * inner}, DType::F32), Tensor::zeros({experts, hidden}, DType::F32)};
  Tensor dx = expert_mlp_backward(dy, x, activations, offsets, gate_up, down, dgate_up, ddown, variant, bias_grads);
  auto loss = [&] { return weighted_sum(forward(), dy); };
  expect_gradient("dx", x, loss, dx);
  expect_gradient("dgate_up", gate_up, loss, dgate_up);
  expect_gradient("ddown", down, loss, ddown);
  expect_gradient("dgate_up_bias", variant.gate_up_bias, loss, bias_grads.gate_up_bias);
  expect_gradient("ddown_bias", variant.down_bias, loss, bias_grads.down_bias);
  for (int64_t i = 0; i < 2 * inner; ++i) EXPECT_EQ(bias_grads.gate_up_bias.data<float>()[2 * inner + i], 0.0f);  // expert 1
}

// (Last in the file: the draws above stay as they were before it.)
// DeepSeek-V2's router: the best 2 of 3 groups (scored by their best expert) and a scaling factor, with and without
// renormalisation (its config never asks for it; the op takes both).
TEST(GradCheck, RouterWeightsGroupLimitedAndScaled) {
  const SoftmaxTopkOptions options{.num_groups = 3, .topk_groups = 2, .scaling = 2.5f};
  for (bool normalize : {false, true}) {
    Tensor logits = separated_logits(5, 6), dweights = random({5 * 2});
    const std::vector<float> dw(dweights.data<float>(), dweights.data<float>() + 10);
    Tensor dlogits = router_topk_backward(router_topk_forward(logits, 2, normalize, options), dw);
    auto loss = [&] {
      Routing r = router_topk_forward(logits, 2, normalize, options);
      return weighted_sum(Tensor::from_vector(r.weight, {10}), dweights);
    };
    expect_gradient(normalize ? "dlogits (grouped, scaled, normalized)" : "dlogits (grouped, scaled)", logits, loss,
                    dlogits);
  }
}

// The group limit as group_limited_greedy applies it: each group scored by its best expert, the lower-scored
// groups' experts never chosen even where they beat a kept group's second best.
TEST(Router, GroupLimitKeepsTheGroupsWithTheBestExperts) {
  // Groups {0,1} {2,3} {4,5}: best probabilities at experts 0 (group 0) and 5 (group 2); group 1's experts are the
  // second and third most probable overall, yet only groups 0 and 2 are kept.
  const Tensor logits = Tensor::from_vector(std::vector<float>{5.0f, 0.0f, 4.0f, 3.9f, 1.0f, 4.5f}, {1, 6});
  const Routing plain = router_topk_forward(logits, 2, false);
  EXPECT_EQ(plain.expert, (std::vector<int32_t>{0, 5}));
  const Routing grouped = router_topk_forward(logits, 3, false, {.num_groups = 3, .topk_groups = 2, .scaling = 2.0f});
  EXPECT_EQ(grouped.expert, (std::vector<int32_t>{0, 5, 4}));
  const Routing all = router_topk_forward(logits, 3, false);
  EXPECT_EQ(all.expert, (std::vector<int32_t>{0, 5, 2}));
  EXPECT_FLOAT_EQ(grouped.weight[0], 2.0f * all.weight[0]);
  EXPECT_FLOAT_EQ(grouped.weight[1], 2.0f * all.weight[1]);
}

// ERNIE 4.5's choice bias: the k largest p + bias are chosen, in that order; their weights are p renormalised, and
// the backward is the plain router's for those experts.
TEST(Router, ChoiceBiasChoosesButDoesNotWeigh) {
  const Tensor logits = Tensor::from_vector(std::vector<float>{2.0f, 1.0f, 0.5f, 0.0f}, {1, 4});
  const Tensor bias = Tensor::from_vector(std::vector<float>{0.0f, 0.0f, 0.9f, 0.1f}, {4});
  const Routing biased = router_topk_forward(logits, 2, true, {.choice_bias = bias});
  EXPECT_EQ(biased.expert, (std::vector<int32_t>{2, 0}));  // p ≈ .58 .21 .13 .08: scores .58 .21 1.03 .18
  const Routing forced = router_topk_weigh(logits, biased.expert, 2, true);
  EXPECT_EQ(biased.weight, forced.weight);
  const std::vector<float> dweight = {0.5f, -1.0f};
  EXPECT_TRUE(router_topk_backward(biased, dweight).same_bytes(router_topk_backward(forced, dweight)));
  EXPECT_EQ(router_topk_forward(logits, 2, true).expert, (std::vector<int32_t>{0, 1}));
}

// GPT-OSS's and Granite's top-k-then-softmax router weighed at given choices: its own choices give the forward's
// weights bit for bit (and so its backward), and other choices get the softmax over their logits in their order.
TEST(Router, TopkThenSoftmaxWeighsGivenChoices) {
  std::mt19937 rng(20261206);
  std::normal_distribution<float> normal;
  std::vector<float> values(5 * 7);
  for (float& v : values) v = normal(rng);
  const Tensor logits = Tensor::from_vector(values, {5, 7});
  const Routing own = router_topk_then_softmax_forward(logits, 3);
  const Routing forced = router_topk_then_softmax_weigh(logits, own.expert, 3);
  EXPECT_EQ(forced.expert, own.expert);
  EXPECT_EQ(forced.weight, own.weight);
  std::vector<float> dweight(own.weight.size());
  for (float& d : dweight) d = normal(rng);
  EXPECT_TRUE(
      router_topk_then_softmax_backward(own, dweight).same_bytes(router_topk_then_softmax_backward(forced, dweight)));

  std::vector<int32_t> other = own.expert;
  std::swap(other[0], other[2]);  // token 0's choices in another order, then its 3rd replaced by an unchosen expert
  for (int32_t e = 0; e < 7; ++e)
    if (std::find(own.expert.begin(), own.expert.begin() + 3, e) == own.expert.begin() + 3) other[2] = e;
  const Routing weighed = router_topk_then_softmax_weigh(logits, other, 3);
  const float* l = logits.data<float>();
  double total = 0;
  for (int j = 0; j < 3; ++j) total += std::exp(double(l[other[size_t(j)]]));
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(weighed.weight[size_t(j)], std::exp(double(l[other[size_t(j)]])) / total, 1e-6);
  EXPECT_THROW(router_topk_then_softmax_weigh(logits, {0, 1}, 3), Error);
}

}  // namespace
}  // namespace moetune::ops
