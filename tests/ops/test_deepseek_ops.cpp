// The CPU ops DeepSeek-V3 brought: the sigmoid group-limited router (forward against transformers 5.17's
// DeepseekV3TopkRouter on fixed logits, backward by finite differences), the MLA RoPE (interleaved and
// scaled; against ops::apply_rope and by finite differences) and YaRN's frequencies and scales (against
// transformers' _compute_yarn_parameters / yarn_apply_mscale, values printed by transformers 5.17).
#include <gtest/gtest.h>

#include <map>

#include "gradcheck_util.h"
#include "moetune/ops/mla_rope.h"
#include "moetune/ops/rope.h"
#include "moetune/ops/sigmoid_router.h"

namespace moetune::ops {
namespace {

Tensor from(std::vector<float> values, Shape shape) { return Tensor::from_vector(values, std::move(shape)); }

const GroupLimitedRouter kRouter{/*top_k=*/3, /*num_groups=*/4, /*topk_groups=*/2, /*renormalize=*/true, /*scaling=*/2.5};

TEST(SigmoidRouter, MatchesTransformersGroupLimitedChoiceAndWeights) {
  const Tensor logits = from({0.5f, -1.0f, 2.0f, 0.1f, -0.3f, 1.5f, 0.7f, -2.0f,  //
                              -0.5f, 1.2f, 0.3f, 0.9f, -1.1f, 0.2f, 1.9f, 0.4f},
                             {2, 8});
  const Tensor bias = from({0.0f, 0.3f, -0.2f, 0.1f, 0.5f, -0.4f, 0.0f, 0.2f}, {8});
  const Routing r = sigmoid_router_forward(logits, bias, kRouter);
  // transformers (unsorted top-k): token 0 -> [2, 4, 3], token 1 -> [1, 6, 7], weights in that order.
  const std::map<int32_t, float> expected[2] = {{{2, 1.20239842f}, {4, 0.580939293f}, {3, 0.716662407f}},
                                                {{1, 0.858839035f}, {6, 0.97211802f}, {7, 0.669043124f}}};
  for (int t = 0; t < 2; ++t) {
    std::map<int32_t, float> got;
    for (int j = 0; j < 3; ++j) got[r.expert[size_t(t * 3 + j)]] = r.weight[size_t(t * 3 + j)];
    ASSERT_EQ(got.size(), 3u);
    for (const auto& [expert, weight] : expected[t]) {
      ASSERT_TRUE(got.count(expert)) << "token " << t << " expert " << expert;
      EXPECT_NEAR(got[expert], weight, 1e-6) << "token " << t << " expert " << expert;
    }
  }
}

TEST(SigmoidRouter, BiasSteersTheChoiceButNotTheWeights) {
  const Tensor logits = from({1.0f, 0.0f, 0.0f, 0.0f}, {1, 4});
  const GroupLimitedRouter one{1, 1, 1, false, 1.0};
  const Routing plain = sigmoid_router_forward(logits, Tensor(), one);
  EXPECT_EQ(plain.expert[0], 0);
  const Routing steered = sigmoid_router_forward(logits, from({0.0f, 0.0f, 0.0f, 2.0f}, {4}), one);
  EXPECT_EQ(steered.expert[0], 3);
  EXPECT_FLOAT_EQ(steered.weight[0], 0.5f);  // sigmoid(0), the unbiased score
}

TEST(SigmoidRouter, RefusesGroupsItCannotRank) {
  EXPECT_THROW(sigmoid_router_forward(Tensor::zeros({1, 4}, DType::F32), Tensor(), {1, 4, 1, true, 1.0}), Error);
  EXPECT_THROW(sigmoid_router_forward(Tensor::zeros({1, 8}, DType::F32), Tensor(), {5, 4, 2, true, 1.0}), Error);
}

// The choice is piecewise constant: logits spread far apart keep it fixed under the ±1e-2 nudges.
TEST(GradCheck, SigmoidRouterWeights) {
  for (bool renormalize : {true, false}) {
    const GroupLimitedRouter router{3, 4, 2, renormalize, 2.5};
    Tensor logits = Tensor::empty({3, 8}, DType::F32);
    for (int64_t i = 0; i < logits.numel(); ++i) logits.data<float>()[i] = float((i * 5) % 24) * 0.2f - 2.0f;
    const Tensor bias = random({8}, 0.1f);
    const Routing routing = sigmoid_router_forward(logits, bias, router);
    std::vector<float> dw(routing.weight.size());
    for (size_t i = 0; i < dw.size(); ++i) dw[i] = float(i % 5) * 0.3f - 0.6f;
    const Tensor dlogits = sigmoid_router_backward(routing, dw, router);
    auto loss = [&] {
      const Routing r = sigmoid_router_forward(logits, bias, router);
      EXPECT_EQ(r.expert, routing.expert);
      double total = 0;
      for (size_t i = 0; i < dw.size(); ++i) total += double(r.weight[i]) * dw[i];
      return total;
    };
    expect_gradient(renormalize ? "dlogits (renormalised)" : "dlogits", logits, loss, dlogits);
  }
}

// Interleaved pairs (x0, x1), (x2, x3), ... rotated and written as [firsts | seconds] equal rotate-half RoPE
// on the de-interleaved vector; the scale multiplies the result.
TEST(MlaRope, InterleavedIsRotateHalfOnTheDeinterleavedVectorTimesTheScale) {
  const int64_t tokens = 5, heads = 3, dim = 8;
  RopeSpec spec;
  spec.theta = 100.0;
  const std::vector<float> inv = rope_inverse_frequencies(spec, dim);
  const std::vector<int64_t> positions = {0, 1, 2, 0, 7};
  const Tensor x = random({tokens, heads, dim});
  Tensor deinterleaved = Tensor::empty(x.shape(), DType::F32);
  for (int64_t row = 0; row < tokens * heads; ++row)
    for (int64_t i = 0; i < dim / 2; ++i) {
      deinterleaved.data<float>()[row * dim + i] = x.data<float>()[row * dim + 2 * i];
      deinterleaved.data<float>()[row * dim + dim / 2 + i] = x.data<float>()[row * dim + 2 * i + 1];
    }
  apply_rope(deinterleaved, inv, positions);
  const Tensor interleaved = mla_rope_forward(x, {inv, true, 0.75f}, positions);
  const Tensor halves = mla_rope_forward(x, {inv, false, 1.0f}, positions);
  Tensor plain = x.clone();
  apply_rope(plain, inv, positions);
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_NEAR(interleaved.data<float>()[i], 0.75f * deinterleaved.data<float>()[i], 1e-6) << i;
    EXPECT_NEAR(halves.data<float>()[i], plain.data<float>()[i], 1e-6) << i;
  }
}

TEST(GradCheck, MlaRope) {
  RopeSpec spec;
  spec.theta = 50.0;
  const std::vector<int64_t> positions = {3, 0, 1, 5};
  for (bool interleaved : {true, false}) {
    const MlaRope rope{rope_inverse_frequencies(spec, 6), interleaved, 1.3f};
    Tensor x = random({4, 2, 6});
    const Tensor dy = random({4, 2, 6});
    auto loss = [&] { return weighted_sum(mla_rope_forward(x, rope, positions), dy); };
    expect_gradient(interleaved ? "dx (interleaved)" : "dx", x, loss, mla_rope_backward(dy, rope, positions));
  }
}

// DeepSeek-V3's YaRN through the shared RopeSpec (ops/rope.h).
RopeSpec yarn(double factor, int64_t original, double mscale, double mscale_all_dim) {
  RopeSpec y;
  y.type = "yarn";
  y.factor = factor;
  y.original_max_position_embeddings = original;
  y.mscale = mscale;
  y.mscale_all_dim = mscale_all_dim;
  return y;
}

TEST(Yarn, FrequenciesAndScalesMatchTransformers) {
  const RopeSpec tiny = yarn(4.0, 16, 0.707, 1.0);
  const std::vector<float> want_tiny = {1.0f, 0.0250000004f, 0.00249999994f, 0.000250000012f};
  const std::vector<float> got_tiny = rope_inverse_frequencies(tiny, 8);
  for (size_t i = 0; i < want_tiny.size(); ++i) EXPECT_FLOAT_EQ(got_tiny[i], want_tiny[i]) << i;
  EXPECT_NEAR(rope_attention_scaling(tiny), 0.964326914892074, 1e-12);
  EXPECT_NEAR(std::pow(yarn_mscale(4.0, 1.0), 2) / std::sqrt(12.0), 0.37426067039004857, 1e-12);

  // DeepSeek-V3's own rope_scaling, on a 16-wide rope part.
  const RopeSpec v3 = yarn(40.0, 4096, 1.0, 1.0);
  const std::vector<float> want_v3 = {1.0f, 0.316227764f, 0.100000001f, 0.0239147246f, 0.00512499968f,
                                      0.000849862176f, 2.49999994e-05f, 7.90569447e-06f};
  const std::vector<float> got_v3 = rope_inverse_frequencies(v3, 16);
  for (size_t i = 0; i < want_v3.size(); ++i) EXPECT_FLOAT_EQ(got_v3[i], want_v3[i]) << i;
  EXPECT_DOUBLE_EQ(rope_attention_scaling(v3), 1.0);
  EXPECT_NEAR(std::pow(yarn_mscale(40.0, 1.0), 2) / std::sqrt(192.0), 0.1352337788608801, 1e-12);
}

}  // namespace
}  // namespace moetune::ops
