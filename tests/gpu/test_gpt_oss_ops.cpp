// GPT-OSS's GPU ops against their CPU references: cuDNN flash attention with a sliding window (smaller than the
// documents) and with learned sinks applied around it (ops/cuda/attention_sinks.h), packed documents and
// grouped-query heads, forward and every gradient including the sinks'; the top-k-then-softmax router; the
// clamped SwiGLU with inputs well past the clamp; the per-expert bias add and its gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/activation.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/cuda/activation.h"
#include "moetune/ops/cuda/attention.h"
#include "moetune/ops/cuda/attention_sinks.h"
#include "moetune/ops/cuda/expert_bias.h"
#include "moetune/ops/cuda/router_topk_softmax.h"
#include "moetune/ops/router.h"
#include "moetune/ops/router_limits.h"

namespace moetune {
namespace {

using testing::document_starts;
using testing::kBf16Tolerance;
using testing::poisoned;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

const Device kGpu = Device::cuda();

struct AttentionCase {
  std::vector<int64_t> lengths;
  int64_t heads = 8, kv_heads = 2, head_dim = 64;
  int64_t window = 0;  // 0: none
  bool sinks = false;
  DType sink_dtype = DType::F32;
  double scale_factor = 1.0;  // YaRN's attention scaling m² multiplies the softmax scale
  float sink_std = 2.0f;
};

class GptOssAttentionGpu : public testing::GpuTest {
 protected:
  void check(const AttentionCase& c) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << ", window " << c.window << ", sinks " << c.sinks
                                      << ", heads " << c.heads << "/" << c.kv_heads << ", head_dim " << c.head_dim
                                      << ", " << c.lengths.size() << " documents");
    const std::vector<int64_t> starts = document_starts(c.lengths);
    const int64_t tokens = int64_t(starts.size()), d = c.head_dim;
    const int64_t longest = *std::max_element(c.lengths.begin(), c.lengths.end());
    const double scale = c.scale_factor / std::sqrt(double(d));
    const Tensor q = random_normal({tokens, c.heads, d}, DType::BF16, kGpu, rng());
    const Tensor k = random_normal({tokens, c.kv_heads, d}, DType::BF16, kGpu, rng());
    const Tensor v = random_normal({tokens, c.kv_heads, d}, DType::BF16, kGpu, rng());
    const Tensor dout = random_normal({tokens, c.heads, d}, DType::BF16, kGpu, rng());
    // Sinks around the typical log-sum-exp (a few nats), so that they take a real share of the softmax.
    const Tensor sinks = c.sinks ? random_normal({c.heads}, c.sink_dtype, kGpu, rng(), c.sink_std) : Tensor();

    ops::AttentionVariant variant;
    if (c.window > 0) variant.sliding_window = c.window;
    if (c.sinks) variant.sinks = to_cpu_f32(sinks);
    const ops::AttentionMask mask{.document_start = starts};
    const Tensor qf = to_cpu_f32(q), kf = to_cpu_f32(k), vf = to_cpu_f32(v), doutf = to_cpu_f32(dout);
    const Tensor expected_out = ops::causal_attention_forward(qf, kf, vf, mask, scale, variant);
    const ops::AttentionGrads expected =
        ops::causal_attention_backward(doutf, qf, kf, vf, expected_out, mask, scale, variant);

    const ops::cuda::PackedDocuments docs = ops::cuda::pack_documents(starts, longest);
    const Tensor out = poisoned(q.shape(), DType::BF16, kGpu);
    const Tensor stats = ops::cuda::causal_attention_forward(q, k, v, docs, scale, out, c.window);
    if (c.sinks) ops::cuda::attention_sinks_forward(sinks, out, stats);
    const Tensor dq = poisoned(q.shape(), DType::BF16, kGpu), dk = poisoned(k.shape(), DType::BF16, kGpu),
                 dv = poisoned(v.shape(), DType::BF16, kGpu);
    Tensor dsinks;
    if (c.sinks) {
      dsinks = Tensor::zeros({c.heads}, DType::F32, kGpu);
      ops::cuda::attention_sinks_backward(sinks, dout, out, stats, dsinks);
    }
    ops::cuda::causal_attention_backward(dout, q, k, v, out, stats, docs, scale, dq, dk, dv, c.window);

    EXPECT_LT(relative_error(out, expected_out), kBf16Tolerance);
    EXPECT_LT(relative_error(dq, expected.dq), kBf16Tolerance);
    EXPECT_LT(relative_error(dk, expected.dk), kBf16Tolerance);
    EXPECT_LT(relative_error(dv, expected.dv), kBf16Tolerance);
    if (c.sinks) {
      // d(sink) per head is -sum_t p_sink(t) (dO . O)(t): a sum of signed terms over every token of the head that
      // reads O as the GPU rounded it to bf16, so the cancellation can lift the bf16 rounding above 1% of the
      // result (1.08e-2 with seed 1066376616, session 17); a wrong formula is off by O(1).
      EXPECT_LT(relative_error(dsinks, expected.dsinks), 2 * kBf16Tolerance);
    }
  }
};

TEST_F(GptOssAttentionGpu, SlidingWindowSmallerThanTheDocuments) {
  check({.lengths = {300}, .window = 128});
  check({.lengths = {1, 17, 64, 5, 130}, .window = 16});
  check({.lengths = {40, 3, 90}, .heads = 4, .kv_heads = 4, .head_dim = 128, .window = 7});
}

// gpt_oss_tiny's shapes (head_dim 8, documents of equal length, all longer than the window), and YaRN's
// attention scaling m² (1.81 for factor 32) folded into the softmax scale beside the sinks, which it does not scale.
TEST_F(GptOssAttentionGpu, TinyShapesAndYarnScaledSoftmax) {
  check({.lengths = {8, 8}, .heads = 4, .kv_heads = 2, .head_dim = 8, .window = 4});
  check({.lengths = {8, 5}, .heads = 4, .kv_heads = 2, .head_dim = 8, .window = 4});
  check({.lengths = {64, 64}, .window = 16, .sinks = true, .scale_factor = 1.813});
  check({.lengths = {300}, .window = 128, .sinks = true, .scale_factor = 1.813, .sink_std = 0.5f});
}

TEST_F(GptOssAttentionGpu, SinksOnFullAttention) {
  check({.lengths = {300}, .sinks = true});
  check({.lengths = {1, 17, 64, 5}, .sinks = true, .sink_dtype = DType::BF16});
}

TEST_F(GptOssAttentionGpu, SinksWithSlidingWindow) {
  check({.lengths = {1, 17, 64, 5, 130}, .window = 16, .sinks = true});
  check({.lengths = {257}, .heads = 64, .kv_heads = 8, .head_dim = 64, .window = 128, .sinks = true});
}

// Logits with no near-ties among the top choices: each row a random permutation of evenly spaced levels.
Tensor distinct_logits(int64_t tokens, int64_t experts, std::mt19937& rng) {
  Tensor logits = Tensor::empty({tokens, experts}, DType::F32);
  std::vector<int> level(static_cast<size_t>(experts));
  std::uniform_real_distribution<float> jitter(-0.25f, 0.25f);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(level.begin(), level.end(), 0);
    std::shuffle(level.begin(), level.end(), rng);
    for (int64_t e = 0; e < experts; ++e)
      logits.data<float>()[t * experts + e] = (float(level[size_t(e)]) + jitter(rng)) * 6.0f / float(experts);
  }
  return logits;
}

class GptOssRouterGpu : public testing::GpuTest {};

TEST_F(GptOssRouterGpu, TopkThenSoftmaxMatchesCpu) {
  for (auto [tokens, experts, top_k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {37, 4, 2}, {100, 32, 4}, {257, 128, 4}, {61, 256, 16}, {45, 20, 3}, {0, 8, 2}}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << " T=" << tokens << " E=" << experts << " k=" << top_k);
    const Tensor logits = distinct_logits(tokens, experts, rng());
    const ops::Routing expected = ops::router_topk_then_softmax_forward(logits, top_k);
    const Tensor ids = poisoned({tokens, top_k}, DType::I32, kGpu);
    const Tensor weights = poisoned({tokens, top_k}, DType::F32, kGpu);
    ops::cuda::router_topk_softmax_forward(logits.to(kGpu), top_k, ids, weights);
    const Tensor host_ids = ids.to(Device::cpu());
    EXPECT_TRUE(std::equal(expected.expert.begin(), expected.expert.end(), host_ids.data<int32_t>()));
    if (tokens == 0) continue;
    EXPECT_LT(relative_error(weights, Tensor::from_vector(expected.weight, {tokens, top_k})), 1e-5);

    const Tensor dweights = random_normal({tokens, top_k}, DType::F32, Device::cpu(), rng());
    const std::vector<float> dw(dweights.data<float>(), dweights.data<float>() + dweights.numel());
    const Tensor expected_dlogits = ops::router_topk_then_softmax_backward(expected, dw);
    const Tensor dlogits = poisoned({tokens, experts}, DType::F32, kGpu);
    ops::cuda::router_topk_softmax_backward(ids, weights, dweights.to(kGpu), dlogits);
    EXPECT_LT(relative_error(dlogits, expected_dlogits), 1e-4);
  }
}

TEST_F(GptOssRouterGpu, RejectsBadShapes) {
  const Tensor logits = Tensor::zeros({4, 8}, DType::F32, kGpu);
  const Tensor ids = Tensor::empty({4, 2}, DType::I32, kGpu), weights = Tensor::empty({4, 2}, DType::F32, kGpu);
  EXPECT_THROW(ops::cuda::router_topk_softmax_forward(logits, 9, ids, weights), Error);  // k > E
  EXPECT_THROW(ops::cuda::router_topk_softmax_forward(logits, 3, ids, weights), Error);  // outputs [T, 2]
  EXPECT_THROW(ops::cuda::router_topk_softmax_forward(Tensor::zeros({4, ops::kRouterMaxExperts + 1}, DType::F32, kGpu),
                                                      2, ids, weights),
               Error);  // more experts than a lane's register slots hold
}

class GptOssExpertsGpu : public testing::GpuTest {};

TEST_F(GptOssExpertsGpu, ClampedSwigluMatchesCpu) {
  const ops::SwigluClamp clamp;  // alpha 1.702, limit 7
  for (auto [rows, inner] : std::vector<std::pair<int64_t, int64_t>>{{37, 64}, {100, 2880}, {5, 13}, {0, 8}}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << " rows " << rows << " inner " << inner);
    // scale 6: about a quarter of the values lie past ±7, so both clamps and their zero gradients are exercised.
    const Tensor gate_up = random_normal({rows, 2 * inner}, DType::BF16, kGpu, rng(), 6.0f);
    const Tensor dout = random_normal({rows, inner}, DType::BF16, kGpu, rng());
    const Tensor out = poisoned({rows, inner}, DType::BF16, kGpu);
    ops::cuda::clamped_swiglu_forward(gate_up, clamp, out);
    const Tensor dgate_up = poisoned(gate_up.shape(), DType::BF16, kGpu);
    ops::cuda::clamped_swiglu_backward(dout, gate_up, clamp, dgate_up);
    // The forward's output recomputed in the same pass, over dout: bit for bit the forward's, the same gradient.
    const Tensor in_place = dout.clone(), dgate_up_fused = poisoned(gate_up.shape(), DType::BF16, kGpu);
    ops::cuda::clamped_swiglu_backward(in_place, gate_up, clamp, dgate_up_fused, /*recomputed=*/in_place);
    if (rows == 0) continue;
    EXPECT_EQ(relative_error(in_place, to_cpu_f32(out)), 0.0);  // bf16 -> f32 is exact: equal values, equal bits
    EXPECT_EQ(relative_error(dgate_up_fused, to_cpu_f32(dgate_up)), 0.0);
    EXPECT_LT(relative_error(out, ops::clamped_swiglu_forward(to_cpu_f32(gate_up), clamp)), kBf16Tolerance);
    EXPECT_LT(relative_error(dgate_up, ops::clamped_swiglu_backward(to_cpu_f32(dout), to_cpu_f32(gate_up), clamp)),
              kBf16Tolerance);
  }
}

TEST_F(GptOssExpertsGpu, ExpertBiasAddAndGradient) {
  for (DType bias_dtype : {DType::BF16, DType::F32}) {
    // Groups of uneven sizes, two of them empty, and rows past the last group that must stay untouched.
    const std::vector<int32_t> offsets = {0, 5, 5, 40, 41, 41, 100};
    const int64_t experts = int64_t(offsets.size()) - 1, rows = 104, cols = 72;
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << " bias " << dtype_name(bias_dtype));
    const Tensor y = random_normal({rows, cols}, DType::BF16, kGpu, rng());
    const Tensor bias = random_normal({experts, cols}, bias_dtype, kGpu, rng());
    const Tensor device_offsets = Tensor::from_vector(offsets, {experts + 1}).to(kGpu);
    const Tensor before = to_cpu_f32(y), bias_f = to_cpu_f32(bias);
    ops::cuda::expert_bias_add(y, bias, device_offsets);
    Tensor expected = before.clone();
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t r = offsets[size_t(e)]; r < offsets[size_t(e + 1)]; ++r)
        for (int64_t c = 0; c < cols; ++c) expected.data<float>()[r * cols + c] += bias_f.data<float>()[e * cols + c];
    EXPECT_LT(relative_error(y, expected), 1e-2);
    const Tensor after = to_cpu_f32(y);
    for (int64_t i = 100 * cols; i < rows * cols; ++i) ASSERT_EQ(after.data<float>()[i], before.data<float>()[i]);

    const Tensor dy = random_normal({rows, cols}, DType::BF16, kGpu, rng());
    const Tensor start = random_normal({experts, cols}, bias_dtype, kGpu, rng());
    const Tensor dbias = start.clone();
    ops::cuda::expert_bias_grad(dy, device_offsets, dbias);
    Tensor expected_grad = to_cpu_f32(start);
    const Tensor dyf = to_cpu_f32(dy);
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t r = offsets[size_t(e)]; r < offsets[size_t(e + 1)]; ++r)
        for (int64_t c = 0; c < cols; ++c)
          expected_grad.data<float>()[e * cols + c] += dyf.data<float>()[r * cols + c];
    EXPECT_LT(relative_error(dbias, expected_grad), bias_dtype == DType::F32 ? 1e-5 : 1e-2);
  }
}

}  // namespace
}  // namespace moetune
