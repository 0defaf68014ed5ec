// The GPU routing ops (softmax top-k router with DeepSeek-V2's group limit, token permutation and combine,
// load-balancing loss) against their CPU references in ops/router.h and ops/permute.h. Router logits are drawn without
// near-ties, so expert ids must match exactly; plans (offsets, row_of, source) must match exactly; everything else by
// relative error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/cuda/aux_loss.h"
#include "moetune/ops/cuda/permute.h"
#include "moetune/ops/cuda/router.h"
#include "moetune/ops/permute.h"
#include "moetune/ops/router.h"

namespace moetune {
namespace {

using testing::kBf16Tolerance;
using testing::poisoned;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

// The router path is f32 end to end; only the summation order and expf's last bit differ from the CPU.
constexpr double kF32Tolerance = 1e-5;
// Gradients go through one more cancellation (dp − ⟨p, dp⟩).
constexpr double kF32GradTolerance = 1e-4;

const Device kGpu = Device::cuda();

struct RoutingCase {
  int64_t tokens, experts, top_k;
  int64_t active_experts;  // experts past this one are biased so far down that they are never chosen
  bool normalize = true;
  ops::SoftmaxTopkOptions limit;  // DeepSeek-V2's groups and scaling; none by default
};

std::string describe(const RoutingCase& c) {
  return fmt::format("T={} E={} k={} active={} normalize={} groups {} of {} scaling {}", c.tokens, c.experts, c.top_k,
                     c.active_experts, c.normalize, c.limit.topk_groups, c.limit.num_groups, c.limit.scaling);
}

// Sizes not a multiple of the kernels' 8 warps per block, the real model's E=128/k=8, E=256, Kimi-K2's E=384/k=8
// and the limits (E=512, k=16), experts that get no tokens, and no tokens at all.
const std::vector<RoutingCase> kCases = {
    {37, 8, 2, 8, true},      {37, 8, 2, 8, false},      {37, 16, 2, 5, true},  {100, 64, 6, 64, true},
    {257, 128, 8, 128, true}, {61, 256, 16, 256, false}, {45, 20, 3, 20, true}, {0, 16, 2, 16, true},
    {53, 384, 8, 300, true},  {29, 512, 16, 512, false},
};

// DeepSeek-V2's group_limited_greedy and routed_scaling_factor: its 160 experts in 8 groups (3 kept, k=6, ×16), a
// tiny 4-group case renormalised, 32 groups of 2 (the kernels' limit), groups holding only inactive experts,
// every group kept, and scaling alone.
const std::vector<RoutingCase> kGroupedCases = {
    {61, 160, 6, 160, false, {8, 3, 16.0f}},  {37, 8, 2, 8, true, {4, 2, 2.5f}},   {45, 64, 6, 64, true, {32, 5, 1.0f}},
    {53, 384, 8, 300, false, {8, 4, 2.827f}}, {29, 20, 3, 20, true, {5, 5, 1.0f}}, {40, 64, 6, 64, true, {1, 1, 3.0f}},
};

std::vector<RoutingCase> every_router_case() {
  std::vector<RoutingCase> cases = kCases;
  cases.insert(cases.end(), kGroupedCases.begin(), kGroupedCases.end());
  return cases;
}

// Logits whose softmax has no near-ties: each row is a random permutation of evenly spaced levels with jitter of
// a quarter step, so any two probabilities differ by a factor of at least exp(step / 2) (> 1.003 for E=512).
Tensor distinct_logits(const RoutingCase& c, std::mt19937& rng) {
  Tensor logits = Tensor::empty({c.tokens, c.experts}, DType::F32);
  const float step = 4.0f / float(c.experts);
  std::uniform_real_distribution<float> jitter(-0.25f, 0.25f);
  std::vector<int> level(size_t(c.experts));
  for (int64_t t = 0; t < c.tokens; ++t) {
    std::iota(level.begin(), level.end(), 0);
    std::shuffle(level.begin(), level.end(), rng);
    for (int64_t e = 0; e < c.experts; ++e) {
      const float bias = e < c.active_experts ? 0.0f : -20.0f;
      logits.data<float>()[t * c.experts + e] = (float(level[size_t(e)]) + jitter(rng)) * step + bias;
    }
  }
  return logits;
}

std::vector<int32_t> host_ints(const Tensor& device_tensor) {
  const Tensor host = device_tensor.to(Device::cpu());
  return {host.data<int32_t>(), host.data<int32_t>() + host.numel()};
}

std::vector<int32_t> narrowed(const std::vector<int64_t>& values) { return {values.begin(), values.end()}; }

Tensor host_floats(const std::vector<float>& values, Shape shape) { return Tensor::from_vector(values, std::move(shape)); }

Tensor device_ids(const ops::Routing& routing) {
  return Tensor::from_vector(routing.expert, {routing.logits.size(0), routing.top_k}).to(kGpu);
}

// a + b for CPU f32 tensors of one shape.
Tensor plus(const Tensor& a, const Tensor& b) {
  Tensor sum = a.clone();
  for (int64_t i = 0; i < sum.numel(); ++i) sum.data<float>()[i] += b.data<float>()[i];
  return sum;
}

class RouterGpu : public testing::GpuTest {};
class PermuteGpu : public testing::GpuTest {};
class AuxLossGpu : public testing::GpuTest {};

TEST_F(RouterGpu, ForwardMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& c : every_router_case()) {
    SCOPED_TRACE(describe(c));
    const Tensor logits = distinct_logits(c, rng());
    const ops::Routing expected = ops::router_topk_forward(logits, c.top_k, c.normalize, c.limit);
    const Tensor expert_ids = poisoned({c.tokens, c.top_k}, DType::I32, kGpu);
    const Tensor weights = poisoned({c.tokens, c.top_k}, DType::F32, kGpu);
    ops::cuda::router_topk_forward(logits.to(kGpu), c.top_k, c.normalize, expert_ids, weights, c.limit);
    EXPECT_EQ(host_ints(expert_ids), expected.expert);
    EXPECT_LE(relative_error(weights, host_floats(expected.weight, {c.tokens, c.top_k})), kF32Tolerance);
  }
}

// ERNIE 4.5's router: the choice by p + choice_bias, the weights from p. The bias is a permutation of levels a
// whole unit apart (more than any probability), so it alone orders the choice, far from ties; the weights come out of
// the same softmax as the plain cases'.
TEST_F(RouterGpu, ChoiceBiasMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& plain :
       std::vector<RoutingCase>{{37, 8, 2, 8}, {100, 64, 6, 64}, {53, 384, 8, 300}, {29, 12, 3, 12, false}}) {
    RoutingCase c = plain;
    std::vector<float> levels(size_t(c.experts));
    std::iota(levels.begin(), levels.end(), 0.0f);
    std::shuffle(levels.begin(), levels.end(), rng());
    c.limit.choice_bias = Tensor::from_vector(levels, {c.experts});
    SCOPED_TRACE(describe(c) + " with a choice bias");
    const Tensor logits = distinct_logits(c, rng());
    const ops::Routing expected = ops::router_topk_forward(logits, c.top_k, c.normalize, c.limit);
    ops::SoftmaxTopkOptions on_gpu = c.limit;
    on_gpu.choice_bias = c.limit.choice_bias.to(kGpu);
    const Tensor expert_ids = poisoned({c.tokens, c.top_k}, DType::I32, kGpu);
    const Tensor weights = poisoned({c.tokens, c.top_k}, DType::F32, kGpu);
    ops::cuda::router_topk_forward(logits.to(kGpu), c.top_k, c.normalize, expert_ids, weights, on_gpu);
    EXPECT_EQ(host_ints(expert_ids), expected.expert);
    EXPECT_LE(relative_error(weights, host_floats(expected.weight, {c.tokens, c.top_k})), kF32Tolerance);
    // The bias alone orders the choice: each token's k experts are those of the k largest levels.
    for (int64_t j = 0; j + 1 < c.top_k && c.tokens > 0; ++j)
      EXPECT_GT(levels[size_t(expected.expert[size_t(j)])], levels[size_t(expected.expert[size_t(j + 1)])]);
  }
}

TEST_F(RouterGpu, BackwardMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& c : every_router_case()) {
    SCOPED_TRACE(describe(c));
    const Tensor logits = distinct_logits(c, rng());
    const ops::Routing routing = ops::router_topk_forward(logits, c.top_k, c.normalize, c.limit);
    const Tensor dweights = random_normal({c.tokens, c.top_k}, DType::F32, Device::cpu(), rng());
    const std::vector<float> dweight(dweights.data<float>(), dweights.data<float>() + dweights.numel());
    const Tensor expected = ops::router_topk_backward(routing, dweight);
    const Tensor dlogits = poisoned({c.tokens, c.experts}, DType::F32, kGpu);
    ops::cuda::router_topk_backward(logits.to(kGpu), device_ids(routing),
                                    host_floats(routing.weight, {c.tokens, c.top_k}).to(kGpu), dweights.to(kGpu),
                                    c.normalize, dlogits, c.limit.scaling);
    EXPECT_LE(relative_error(dlogits, expected), kF32GradTolerance);
  }
}

TEST_F(RouterGpu, RejectsBadShapes) {
  const Tensor logits = Tensor::zeros({4, 8}, DType::F32, kGpu);
  const Tensor ids = Tensor::empty({4, 2}, DType::I32, kGpu), weights = Tensor::empty({4, 2}, DType::F32, kGpu);
  EXPECT_THROW(ops::cuda::router_topk_forward(logits, 9, true, ids, weights), Error);          // k > E
  EXPECT_THROW(ops::cuda::router_topk_forward(logits, 3, true, ids, weights), Error);          // outputs [T, 2]
  EXPECT_THROW(ops::cuda::router_topk_forward(logits.to(Device::cpu()), 2, true, ids, weights), Error);
  EXPECT_THROW(ops::cuda::router_topk_forward(Tensor::zeros({4, 600}, DType::F32, kGpu), 2, true, ids, weights),
               Error);  // E > 512
  EXPECT_THROW(ops::cuda::router_topk_forward(logits, 2, true, ids, weights, {3, 1, 1.0f}), Error);  // 3 ∤ 8
  EXPECT_THROW(ops::cuda::router_topk_forward(logits, 2, true, ids, weights, {8, 1, 1.0f}), Error);  // 1 expert < k
  EXPECT_THROW(ops::cuda::router_topk_forward(logits, 2, true, ids, weights, {4, 5, 1.0f}), Error);  // 5 of 4
  EXPECT_THROW(
      ops::cuda::router_topk_forward(Tensor::zeros({4, 128}, DType::F32, kGpu), 2, true, ids, weights, {64, 2, 1.0f}),
      Error);  // 64 groups > 32
}

// One routed batch: the CPU routing, its CPU plan and the GPU plan built from the same expert ids.
struct RoutedBatch {
  ops::Routing routing;
  ops::ExpertPermutation cpu_plan;
  ops::cuda::DevicePermutation gpu_plan;
};

RoutedBatch route(const RoutingCase& c, std::mt19937& rng) {
  ops::Routing routing = ops::router_topk_forward(distinct_logits(c, rng), c.top_k, c.normalize);
  ops::ExpertPermutation cpu_plan = ops::plan_permutation(routing, c.experts);
  ops::cuda::DevicePermutation gpu_plan = ops::cuda::plan_permutation(device_ids(routing), c.experts);
  return {std::move(routing), std::move(cpu_plan), std::move(gpu_plan)};
}

TEST_F(PermuteGpu, PlanMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    const RoutedBatch batch = route(c, rng());
    EXPECT_EQ(batch.gpu_plan.num_experts, c.experts);
    EXPECT_EQ(batch.gpu_plan.top_k, c.top_k);
    EXPECT_EQ(host_ints(batch.gpu_plan.offsets), narrowed(batch.cpu_plan.offsets));
    EXPECT_EQ(host_ints(batch.gpu_plan.row_of), narrowed(batch.cpu_plan.row_of));
    EXPECT_EQ(host_ints(batch.gpu_plan.source), narrowed(batch.cpu_plan.source));
    if (c.active_experts < c.experts && c.tokens > 0) {  // the case is meant to leave experts without rows
      const std::vector<int32_t> offsets = host_ints(batch.gpu_plan.offsets);
      EXPECT_EQ(offsets[size_t(c.active_experts)], offsets.back());
    }
  }
}

// Hidden sizes: the real model's (16-byte vectors), odd (element at a time), and 12 (8-byte units for BF16,
// 16-byte for F32).
const std::vector<int64_t> kHiddenSizes = {2048, 37, 12};
const std::vector<RoutingCase> kPermuteCases = {
    {37, 16, 2, 5, true}, {37, 8, 2, 8, true}, {70, 128, 8, 128, true}, {70, 384, 8, 384, true}, {0, 8, 2, 8, true}};

TEST_F(PermuteGpu, PermuteTokensCopiesRows) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& c : kPermuteCases)
    for (int64_t hidden : kHiddenSizes)
      for (DType dtype : {DType::BF16, DType::F32}) {
        SCOPED_TRACE(describe(c) + fmt::format(" H={} {}", hidden, dtype_name(dtype)));
        const RoutedBatch batch = route(c, rng());
        const Tensor x = random_normal({c.tokens, hidden}, dtype, kGpu, rng());
        const Tensor out = poisoned({c.tokens * c.top_k, hidden}, dtype, kGpu);
        ops::cuda::permute_tokens(x, batch.gpu_plan, out);
        EXPECT_EQ(relative_error(out, ops::permute_tokens(to_cpu_f32(x), batch.cpu_plan)), 0.0);  // a copy
      }
}

// The three ways to pass the residual: none, a separate tensor, and the output itself.
enum class Residual { None, Separate, Aliased };
const char* residual_name(Residual r) { return r == Residual::None ? "none" : r == Residual::Separate ? "separate" : "aliased"; }

TEST_F(PermuteGpu, PermuteTokensBackwardSumsRows) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& c : kPermuteCases)
    for (int64_t hidden : kHiddenSizes)
      for (DType dtype : {DType::BF16, DType::F32})
        for (Residual residual : {Residual::None, Residual::Separate, Residual::Aliased}) {
          SCOPED_TRACE(describe(c) + fmt::format(" H={} {} residual {}", hidden, dtype_name(dtype), residual_name(residual)));
          const RoutedBatch batch = route(c, rng());
          const Tensor dpermuted = random_normal({c.tokens * c.top_k, hidden}, dtype, kGpu, rng());
          const Tensor base = random_normal({c.tokens, hidden}, dtype, kGpu, rng());
          Tensor expected = ops::permute_tokens_backward(to_cpu_f32(dpermuted), batch.cpu_plan, c.tokens);
          if (residual != Residual::None) expected = plus(expected, to_cpu_f32(base));
          const Tensor dx = residual == Residual::Aliased ? base.clone() : poisoned({c.tokens, hidden}, dtype, kGpu);
          ops::cuda::permute_tokens_backward(dpermuted, batch.gpu_plan, dx,
                                             residual == Residual::None ? Tensor() : residual == Residual::Aliased ? dx : base);
          EXPECT_LE(relative_error(dx, expected), dtype == DType::F32 ? kF32Tolerance : kBf16Tolerance);
        }
}

TEST_F(PermuteGpu, CombineExpertsMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& c : kPermuteCases)
    for (int64_t hidden : kHiddenSizes)
      for (DType dtype : {DType::BF16, DType::F32})
        for (Residual residual : {Residual::None, Residual::Separate, Residual::Aliased}) {
          SCOPED_TRACE(describe(c) + fmt::format(" H={} {} residual {}", hidden, dtype_name(dtype), residual_name(residual)));
          const RoutedBatch batch = route(c, rng());
          const Tensor expert_out = random_normal({c.tokens * c.top_k, hidden}, dtype, kGpu, rng());
          const Tensor base = random_normal({c.tokens, hidden}, dtype, kGpu, rng());
          const Tensor weights = host_floats(batch.routing.weight, {c.tokens, c.top_k}).to(kGpu);
          Tensor expected = ops::combine_experts(to_cpu_f32(expert_out), batch.cpu_plan, batch.routing);
          if (residual != Residual::None) expected = plus(expected, to_cpu_f32(base));
          const Tensor out = residual == Residual::Aliased ? base.clone() : poisoned({c.tokens, hidden}, dtype, kGpu);
          ops::cuda::combine_experts(expert_out, batch.gpu_plan, weights, out,
                                     residual == Residual::None ? Tensor() : residual == Residual::Aliased ? out : base);
          EXPECT_LE(relative_error(out, expected), dtype == DType::F32 ? kF32Tolerance : kBf16Tolerance);
        }
}

TEST_F(PermuteGpu, CombineExpertsBackwardMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& c : kPermuteCases)
    for (int64_t hidden : kHiddenSizes)
      for (DType dtype : {DType::BF16, DType::F32}) {
        SCOPED_TRACE(describe(c) + fmt::format(" H={} {}", hidden, dtype_name(dtype)));
        const RoutedBatch batch = route(c, rng());
        const Tensor dout = random_normal({c.tokens, hidden}, dtype, kGpu, rng());
        const Tensor expert_out = random_normal({c.tokens * c.top_k, hidden}, dtype, kGpu, rng());
        const Tensor weights = host_floats(batch.routing.weight, {c.tokens, c.top_k}).to(kGpu);
        const ops::CombineGrads expected =
            ops::combine_experts_backward(to_cpu_f32(dout), to_cpu_f32(expert_out), batch.cpu_plan, batch.routing);
        const Tensor dexpert_out = poisoned({c.tokens * c.top_k, hidden}, dtype, kGpu);
        const Tensor dweights = poisoned({c.tokens, c.top_k}, DType::F32, kGpu);
        ops::cuda::combine_experts_backward(dout, expert_out, batch.gpu_plan, weights, dexpert_out, dweights);
        // dexpert_out is one product rounded to the output type; dweights are f32 sums of exact inputs.
        EXPECT_LE(relative_error(dexpert_out, expected.dexpert_out), dtype == DType::F32 ? kF32Tolerance : kBf16Tolerance);
        EXPECT_LE(relative_error(dweights, host_floats(expected.dweight, {c.tokens, c.top_k})), kF32GradTolerance);
      }
}

// ---- aux loss -----------------------------------------------------------------------------------------------

constexpr int kLayers = 3;

// A step's routing over kLayers layers sharing one padding mask (a quarter of the tokens padded, or none).
struct AuxStep {
  std::vector<ops::Routing> layers;
  std::vector<uint8_t> token_valid;  // empty: all valid
  double rows = 0;
};

AuxStep aux_step(const RoutingCase& c, bool padded, bool all_padding, std::mt19937& rng) {
  AuxStep step;
  for (int l = 0; l < kLayers; ++l)
    step.layers.push_back(ops::router_topk_forward(distinct_logits(c, rng), c.top_k, c.normalize));
  if (padded || all_padding) {
    std::bernoulli_distribution keep(0.75);
    for (int64_t t = 0; t < c.tokens; ++t) step.token_valid.push_back(all_padding ? 0 : uint8_t(keep(rng)));
  }
  const int64_t valid = step.token_valid.empty()
                            ? c.tokens
                            : std::count(step.token_valid.begin(), step.token_valid.end(), uint8_t(1));
  step.rows = double(valid) * kLayers;
  return step;
}

Tensor device_token_valid(const AuxStep& step, int64_t tokens) {
  if (step.token_valid.empty()) return {};
  return Tensor::from_vector(step.token_valid, {tokens}).to(kGpu);
}

// The accumulators the GPU keeps, summed here in double from the same logits: C_e and P_e over counted rows.
void expected_sums(const AuxStep& step, int64_t experts, std::vector<float>& counts, std::vector<float>& prob_sums) {
  std::vector<double> c(static_cast<size_t>(experts)), p(static_cast<size_t>(experts));
  for (const ops::Routing& layer : step.layers)
    for (int64_t t = 0; t < layer.logits.size(0); ++t) {
      if (!step.token_valid.empty() && !step.token_valid[size_t(t)]) continue;
      for (int64_t j = 0; j < layer.top_k; ++j) c[size_t(layer.expert[size_t(t * layer.top_k + j)])] += 1;
      const float* row = layer.logits.data<float>() + t * experts;
      const double max_logit = *std::max_element(row, row + experts);
      double total = 0;
      for (int64_t e = 0; e < experts; ++e) total += std::exp(row[e] - max_logit);
      for (int64_t e = 0; e < experts; ++e) p[size_t(e)] += std::exp(row[e] - max_logit) / total;
    }
  counts.assign(c.begin(), c.end());
  prob_sums.assign(p.begin(), p.end());
}

struct AuxCase {
  bool padded, all_padding;
};
const std::vector<AuxCase> kAuxCases = {{false, false}, {true, false}, {false, true}};
const std::vector<RoutingCase> kAuxRoutingCases = {{37, 16, 2, 5, true},    {37, 8, 2, 8, false},
                                                   {100, 64, 6, 64, true},  {70, 128, 8, 128, true},
                                                   {41, 384, 8, 384, true}, {0, 8, 2, 8, true}};

TEST_F(AuxLossGpu, LossMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RoutingCase& c : kAuxRoutingCases)
    for (const AuxCase& a : kAuxCases) {
      SCOPED_TRACE(describe(c) + fmt::format(" padded={} all_padding={}", a.padded, a.all_padding));
      const AuxStep step = aux_step(c, a.padded, a.all_padding, rng());
      const Tensor token_valid = device_token_valid(step, c.tokens);
      const Tensor counts = Tensor::zeros({c.experts}, DType::F32, kGpu);
      const Tensor prob_sums = Tensor::zeros({c.experts}, DType::F32, kGpu);
      for (const ops::Routing& layer : step.layers)
        ops::cuda::aux_loss_accumulate(layer.logits.to(kGpu), device_ids(layer), token_valid, counts, prob_sums);
      const Tensor loss = poisoned({1}, DType::F32, kGpu);
      ops::cuda::aux_loss_value(counts, prob_sums, step.rows, loss);

      std::vector<float> expected_counts, expected_probs;
      expected_sums(step, c.experts, expected_counts, expected_probs);
      const Tensor host_counts = counts.to(Device::cpu());
      EXPECT_EQ(std::vector<float>(host_counts.data<float>(), host_counts.data<float>() + c.experts), expected_counts);
      EXPECT_LE(relative_error(prob_sums, host_floats(expected_probs, {c.experts})), kF32Tolerance);
      const float expected_loss = float(ops::aux_loss_value(step.layers, step.token_valid));
      EXPECT_LE(relative_error(loss, host_floats({expected_loss}, {1})), kF32Tolerance);
      if (step.rows == 0) {
        EXPECT_EQ(loss.to(Device::cpu()).data<float>()[0], 0.0f);
      }
    }
}

TEST_F(AuxLossGpu, BackwardMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const double scale = 0.37;  // a router_aux_loss_coef-like factor, not 1, so that it is applied
  for (const RoutingCase& c : kAuxRoutingCases)
    for (const AuxCase& a : kAuxCases)
      for (bool zero_start : {true, false}) {
        SCOPED_TRACE(describe(c) + fmt::format(" padded={} all_padding={} zero_start={}", a.padded, a.all_padding, zero_start));
        const AuxStep step = aux_step(c, a.padded, a.all_padding, rng());
        const Tensor token_valid = device_token_valid(step, c.tokens);
        const Tensor counts = Tensor::zeros({c.experts}, DType::F32, kGpu);
        const Tensor prob_sums = Tensor::zeros({c.experts}, DType::F32, kGpu);
        for (const ops::Routing& layer : step.layers)
          ops::cuda::aux_loss_accumulate(layer.logits.to(kGpu), device_ids(layer), token_valid, counts, prob_sums);

        // dlogits accumulate (+=): start from zeros to see the gradient alone, or from values of its size to see
        // that it is added, and that padding rows are left as they were.
        std::vector<Tensor> expected;
        for (int l = 0; l < kLayers; ++l)
          expected.push_back(zero_start ? Tensor::zeros({c.tokens, c.experts}, DType::F32)
                                        : random_normal({c.tokens, c.experts}, DType::F32, Device::cpu(), rng(), 1e-3f));
        std::vector<Tensor> dlogits;
        for (const Tensor& start : expected) dlogits.push_back(start.to(kGpu));
        ops::aux_loss_backward(step.layers, step.token_valid, scale, expected);
        for (int l = 0; l < kLayers; ++l)
          ops::cuda::aux_loss_backward(step.layers[size_t(l)].logits.to(kGpu), token_valid, counts, step.rows, scale,
                                       dlogits[size_t(l)]);
        for (int l = 0; l < kLayers; ++l) {
          SCOPED_TRACE(fmt::format("layer {}", l));
          EXPECT_LE(relative_error(dlogits[size_t(l)], expected[size_t(l)]), kF32GradTolerance);
        }
      }
}

}  // namespace
}  // namespace moetune
