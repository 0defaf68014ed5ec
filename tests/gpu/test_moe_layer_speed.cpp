// Not a check: the speed of one Qwen3-30B-A3B MoE layer on the GPU (issue 11), forward + backward at 8192 tokens
// (128 experts x 768, hidden 2048, top-8, softmax router renormalised over the 8, aux loss on), piece by piece
// and whole, in the order model/cuda/moe_block.cpp runs the ops. Run with
//   moetune_tests --gtest_also_run_disabled_tests --gtest_filter='MoeLayerSpeedGpu.*'
// Routing is real (the router GEMM and top-k run on the layer's input) and made as skewed as wanted: the input's
// last channel is a constant and the router's column for it a fixed per-expert bias times `skew`, beside
// unit-variance noise logits: skew 0 is near-balanced (max/mean expert load 1.2 on the H200), 0.7 gave 11.5 (the
// reference job's random model sends 3.7-15.5 from its second layer on) and 2.0 gave 16 (57 experts without
// rows). Each piece is timed alone (3 warm-up runs, then the mean of 20 back to back), the weight gradients both
// added (a later micro-batch; main's engine did so on every one) and written (a step's first micro-batch); the
// whole layer likewise, with no synchronisation inside it, for both, in three interleaved rounds (the clocks
// drift as the GPU warms), the best round reported. The grouped GEMMs' kernels were chosen with an earlier version of this
// benchmark that also ran CUTLASS's cooperative 128x256 tile (docs/benchmarks.md, issue 11).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_timing.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/activation.h"
#include "moetune/ops/cuda/aux_loss.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/grouped_gemm.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/cuda/permute.h"
#include "moetune/ops/cuda/router.h"

namespace moetune {
namespace {

using testing::random_normal;

const Device kGpu = Device::cuda();
constexpr int64_t kTokens = 8192, kHidden = 2048, kExperts = 128, kInner = 768, kTopK = 8;
constexpr int64_t kRows = kTokens * kTopK;
constexpr double kEps = 1e-6, kAuxScale = 1e-3;

Tensor gpu_empty(Shape shape, DType dtype = DType::BF16) { return Tensor::empty(std::move(shape), dtype, kGpu); }

struct MoeLayer {
  Tensor h, norm_weight, router, gate_up, down;                     // inputs and parameters
  Tensor norm_grad, router_grad, gate_up_grad, down_grad, dout;     // gradients and the layer's output gradient
  Tensor aux_counts, aux_prob_sums;                                 // the step's aux sums over layers
};

// [kExperts, ...] of one expert's weights (drawing 200 M values on the host would take most of a minute; the
// GEMMs' speed does not depend on the values).
Tensor expert_copies(const Tensor& one) {
  Shape shape = one.shape();
  shape[0] = kExperts;
  Tensor all = Tensor::empty(shape, one.dtype(), kGpu);
  for (int64_t e = 0; e < kExperts; ++e) all.narrow(e, 1).copy_from(one);
  return all;
}

Tensor device_copy(const Tensor& t) {
  Tensor copy = Tensor::empty(t.shape(), t.dtype(), kGpu);
  copy.copy_from(t);
  return copy;
}

// h: unit normal with a constant last channel; router: noise of unit logit variance plus skew x a per-expert bias
// on that channel.
MoeLayer make_layer(double skew, std::mt19937& rng) {
  MoeLayer l;
  Tensor h = random_normal({kTokens, kHidden}, DType::F32, Device::cpu(), rng);
  for (int64_t t = 0; t < kTokens; ++t) h.data<float>()[t * kHidden + kHidden - 1] = 1.0f;
  const float noise = float(1 / std::sqrt(double(kHidden)));  // unit-variance logits from unit-RMS inputs
  Tensor router = random_normal({kExperts, kHidden}, DType::F32, Device::cpu(), rng, noise);
  std::normal_distribution<float> normal;
  for (int64_t e = 0; e < kExperts; ++e) router.data<float>()[e * kHidden + kHidden - 1] = float(skew) * normal(rng);
  l.h = ops::cast(h, DType::BF16).to(kGpu);
  l.router = ops::cast(router, DType::BF16).to(kGpu);
  l.norm_weight = ops::cast(Tensor::from_vector(std::vector<float>(kHidden, 1.0f), {kHidden}), DType::BF16).to(kGpu);
  l.gate_up = expert_copies(random_normal({1, 2 * kInner, kHidden}, DType::BF16, kGpu, rng, 0.02f));
  l.down = expert_copies(random_normal({1, kHidden, kInner}, DType::BF16, kGpu, rng, 0.02f));
  l.dout = random_normal({kTokens, kHidden}, DType::BF16, kGpu, rng, 1e-3f);
  l.norm_grad = Tensor::zeros({kHidden}, DType::BF16, kGpu);
  l.router_grad = Tensor::zeros(l.router.shape(), DType::BF16, kGpu);
  l.gate_up_grad = Tensor::zeros(l.gate_up.shape(), DType::BF16, kGpu);
  l.down_grad = Tensor::zeros(l.down.shape(), DType::BF16, kGpu);
  l.aux_counts = Tensor::zeros({kExperts}, DType::F32, kGpu);
  l.aux_prob_sums = Tensor::zeros({kExperts}, DType::F32, kGpu);
  return l;
}

// What the forward keeps for the backward (as MoeBlock stashes it) and what the pieces' timings reuse.
struct Stash {
  Tensor normed, logits, expert_ids, weights, counts, prob_sums, rows, gate_up_out, activated, expert_out, out;
  ops::cuda::DevicePermutation plan;
};

void forward(const MoeLayer& l, Stash& s) {
  s.normed = gpu_empty({kTokens, kHidden});
  ops::cuda::rms_norm_forward(l.h, l.norm_weight, kEps, s.normed);
  s.logits = gpu_empty({kTokens, kExperts}, DType::F32);
  ops::cuda::matmul(s.normed, false, l.router, true, s.logits);
  s.expert_ids = gpu_empty({kTokens, kTopK}, DType::I32);
  s.weights = gpu_empty({kTokens, kTopK}, DType::F32);
  ops::cuda::router_topk_forward(s.logits, kTopK, /*normalize=*/true, s.expert_ids, s.weights);
  s.counts = Tensor::zeros({kExperts}, DType::F32, kGpu);
  s.prob_sums = Tensor::zeros({kExperts}, DType::F32, kGpu);
  ops::cuda::aux_loss_accumulate(s.logits, s.expert_ids, {}, s.counts, s.prob_sums);
  ops::cuda::add(l.aux_counts, s.counts, l.aux_counts);
  ops::cuda::add(l.aux_prob_sums, s.prob_sums, l.aux_prob_sums);
  s.plan = ops::cuda::plan_permutation(s.expert_ids, kExperts);
  s.rows = gpu_empty({kRows, kHidden});
  ops::cuda::permute_tokens(s.normed, s.plan, s.rows);
  s.gate_up_out = gpu_empty({kRows, 2 * kInner});
  ops::cuda::grouped_matmul(s.rows, l.gate_up, true, s.plan.offsets, s.gate_up_out);
  s.activated = gpu_empty({kRows, kInner});
  ops::cuda::swiglu_forward(s.gate_up_out, s.activated);
  s.expert_out = gpu_empty({kRows, kHidden});
  ops::cuda::grouped_matmul(s.activated, l.down, true, s.plan.offsets, s.expert_out);
  s.activated = Tensor();
  s.out = gpu_empty({kTokens, kHidden});
  ops::cuda::combine_experts(s.expert_out, s.plan, s.weights, s.out, l.h);
}

// accumulate: the weight gradients are added to (else written).
void backward(const MoeLayer& l, bool accumulate, const Stash& s) {
  Tensor dexpert_out = gpu_empty({kRows, kHidden});
  Tensor dweights = gpu_empty({kTokens, kTopK}, DType::F32);
  ops::cuda::combine_experts_backward(l.dout, s.expert_out, s.plan, s.weights, dexpert_out, dweights);
  {
    Tensor activated = gpu_empty({kRows, kInner});
    ops::cuda::swiglu_forward(s.gate_up_out, activated);
    ops::cuda::grouped_matmul_weight_grad(dexpert_out, activated, s.plan.offsets, l.down_grad, accumulate);
  }
  Tensor dactivated = gpu_empty({kRows, kInner});
  ops::cuda::grouped_matmul(dexpert_out, l.down, false, s.plan.offsets, dactivated);
  dexpert_out = Tensor();
  Tensor dgate_up = gpu_empty({kRows, 2 * kInner});
  ops::cuda::swiglu_backward(dactivated, s.gate_up_out, dgate_up);
  dactivated = Tensor();
  ops::cuda::grouped_matmul_weight_grad(dgate_up, s.rows, s.plan.offsets, l.gate_up_grad, accumulate);
  Tensor drows = gpu_empty({kRows, kHidden});
  ops::cuda::grouped_matmul(dgate_up, l.gate_up, false, s.plan.offsets, drows);
  dgate_up = Tensor();
  Tensor normed = gpu_empty({kTokens, kHidden});
  ops::cuda::rms_norm_forward(l.h, l.norm_weight, kEps, normed);
  Tensor dnormed = gpu_empty({kTokens, kHidden});
  ops::cuda::permute_tokens_backward(drows, s.plan, dnormed);
  drows = Tensor();
  Tensor dlogits = gpu_empty({kTokens, kExperts}, DType::F32);
  ops::cuda::router_topk_backward(s.logits, s.expert_ids, s.weights, dweights, true, dlogits);
  ops::cuda::aux_loss_backward(s.logits, {}, l.aux_counts, double(kTokens), kAuxScale, dlogits);
  Tensor dlogits_bf16 = gpu_empty({kTokens, kExperts});
  ops::cast_into(dlogits, dlogits_bf16);
  ops::cuda::linear_backward(dlogits_bf16, normed, l.router, dnormed, l.router_grad, {}, /*accumulate_dx=*/true);
  Tensor dh = gpu_empty({kTokens, kHidden});
  ops::cuda::rms_norm_backward(dnormed, l.h, l.norm_weight, kEps, dh, l.norm_grad, l.dout);
}

// The layer's model FLOPs as bench/moe_layer_tflops.py counts them: the router GEMM and the experts' three
// GEMMs per chosen expert, forward, and twice that backward.
constexpr double kGemmFlops = 2.0 * kRows * kHidden * kInner;  // one expert projection of width kInner
constexpr double kRouterFlops = 2.0 * kTokens * kHidden * kExperts;
constexpr double kLayerFlops = 3 * (kRouterFlops + 3 * kGemmFlops);

struct Piece {
  std::string name;
  double flops, bytes;  // bytes: what a memory-bound kernel must move at least (0 for GEMMs)
  std::function<void()> run;
};

void report(const char* what, double ms, double flops, double bytes) {
  std::printf("  %-34s %8.3f ms", what, ms);
  if (flops > 0) std::printf("  %6.0f TFLOP/s", flops / ms / 1e9);
  if (bytes > 0) std::printf("  %6.2f TB/s (%.0f MB)", bytes / ms / 1e9, bytes / 1e6);
  std::printf("\n");
}

void time_layer(double skew) {
  std::mt19937 rng(1234);
  MoeLayer l = make_layer(skew, rng);
  Stash s;
  forward(l, s);
  const Tensor offsets = s.plan.offsets.to(Device::cpu());
  int64_t largest = 0, empty = 0;
  for (int64_t e = 0; e < kExperts; ++e) {
    const int64_t count = offsets.data<int32_t>()[e + 1] - offsets.data<int32_t>()[e];
    largest = std::max(largest, count);
    empty += count == 0;
  }
  std::printf("\nQwen3-30B-A3B MoE layer, %lld tokens, skew %.1f: max/mean expert load %.1f (largest %lld rows), "
              "%lld experts without rows\n",
              (long long)kTokens, skew, double(largest) / (double(kRows) / kExperts), (long long)largest,
              (long long)empty);

  // Inputs and outputs of the backward pieces, made once.
  // (Copies of the forward's rows stand in for gradients of the same shapes.)
  Tensor dexpert_out = device_copy(s.rows);
  Tensor dweights = gpu_empty({kTokens, kTopK}, DType::F32);
  Tensor activated = gpu_empty({kRows, kInner});
  ops::cuda::swiglu_forward(s.gate_up_out, activated);
  Tensor dactivated = device_copy(activated);
  Tensor dgate_up = gpu_empty({kRows, 2 * kInner}), drows = gpu_empty({kRows, kHidden});
  Tensor dnormed = gpu_empty({kTokens, kHidden}), dh = gpu_empty({kTokens, kHidden});
  Tensor dlogits = gpu_empty({kTokens, kExperts}, DType::F32), dlogits_bf16 = gpu_empty({kTokens, kExperts});
  ops::cuda::swiglu_backward(dactivated, s.gate_up_out, dgate_up);
  const Tensor offs = s.plan.offsets;
  const double bf = 2, f32 = 4;  // bytes per element
  const double TH = double(kTokens) * kHidden, RH = double(kRows) * kHidden, RI = double(kRows) * kInner;
  // Tensors are shared handles: the pieces hold copies.
  const auto gg = [offs](Tensor x, Tensor w, bool t, Tensor out) {
    return [=] { ops::cuda::grouped_matmul(x, w, t, offs, out); };
  };
  const auto wg = [offs](bool accumulate, Tensor dy, Tensor x, Tensor dw) {
    return [=] { ops::cuda::grouped_matmul_weight_grad(dy, x, offs, dw, accumulate); };
  };
  std::vector<Piece> pieces = {
      {"rms_norm", 0, 2 * TH * bf, [&] { ops::cuda::rms_norm_forward(l.h, l.norm_weight, kEps, s.normed); }},
      {"router GEMM", kRouterFlops, 0, [&] { ops::cuda::matmul(s.normed, false, l.router, true, s.logits); }},
      {"router top-k", 0, kTokens * (kExperts + 2 * kTopK) * f32,
       [&] { ops::cuda::router_topk_forward(s.logits, kTopK, true, s.expert_ids, s.weights); }},
      {"aux loss sums (+2 adds)", 0, kTokens * kExperts * f32,
       [&] {
         ops::cuda::aux_loss_accumulate(s.logits, s.expert_ids, {}, s.counts, s.prob_sums);
         ops::cuda::add(l.aux_counts, s.counts, l.aux_counts);
         ops::cuda::add(l.aux_prob_sums, s.prob_sums, l.aux_prob_sums);
       }},
      {"permutation plan", 0, 0, [&] { (void)ops::cuda::plan_permutation(s.expert_ids, kExperts); }},
      {"permute rows", 0, RH * bf + TH * bf, [&] { ops::cuda::permute_tokens(s.normed, s.plan, s.rows); }},
      {"gate_up forward", 2 * kGemmFlops, 0, gg(s.rows, l.gate_up, true, s.gate_up_out)},
      {"swiglu", 0, 3 * RI * bf, [&] { ops::cuda::swiglu_forward(s.gate_up_out, activated); }},
      {"down forward", kGemmFlops, 0, gg(activated, l.down, true, s.expert_out)},
      {"combine", 0, RH * bf + 2 * TH * bf,
       [&] { ops::cuda::combine_experts(s.expert_out, s.plan, s.weights, s.out, l.h); }},
      {"combine backward", 0, 2 * RH * bf + TH * bf,
       [&] { ops::cuda::combine_experts_backward(l.dout, s.expert_out, s.plan, s.weights, dexpert_out, dweights); }},
      {"swiglu (recomputed)", 0, 3 * RI * bf, [&] { ops::cuda::swiglu_forward(s.gate_up_out, activated); }},
      {"down dW +=", kGemmFlops, 0, wg(true, dexpert_out, activated, l.down_grad)},
      {"down dW =", kGemmFlops, 0, wg(false, dexpert_out, activated, l.down_grad)},
      {"down dX", kGemmFlops, 0, gg(dexpert_out, l.down, false, dactivated)},
      {"swiglu backward", 0, 5 * RI * bf, [&] { ops::cuda::swiglu_backward(dactivated, s.gate_up_out, dgate_up); }},
      {"gate_up dW +=", 2 * kGemmFlops, 0, wg(true, dgate_up, s.rows, l.gate_up_grad)},
      {"gate_up dW =", 2 * kGemmFlops, 0, wg(false, dgate_up, s.rows, l.gate_up_grad)},
      {"gate_up dX", 2 * kGemmFlops, 0, gg(dgate_up, l.gate_up, false, drows)},
      {"rms_norm (recomputed)", 0, 2 * TH * bf,
       [&] { ops::cuda::rms_norm_forward(l.h, l.norm_weight, kEps, s.normed); }},
      {"permute backward", 0, RH * bf + TH * bf, [&] { ops::cuda::permute_tokens_backward(drows, s.plan, dnormed); }},
      {"router backward (+aux, cast)", 0, 3 * kTokens * kExperts * f32,
       [&] {
         ops::cuda::router_topk_backward(s.logits, s.expert_ids, s.weights, dweights, true, dlogits);
         ops::cuda::aux_loss_backward(s.logits, {}, l.aux_counts, double(kTokens), kAuxScale, dlogits);
         ops::cast_into(dlogits, dlogits_bf16);
       }},
      {"router GEMM backward", 2 * kRouterFlops, 0,
       [&] { ops::cuda::linear_backward(dlogits_bf16, s.normed, l.router, dnormed, l.router_grad, {}, true); }},
      {"rms_norm backward", 0, 4 * TH * bf,
       [&] { ops::cuda::rms_norm_backward(dnormed, l.h, l.norm_weight, kEps, dh, l.norm_grad, l.dout); }},
  };
  for (const Piece& p : pieces) report(p.name.c_str(), testing::mean_gpu_ms(p.run), p.flops, p.bytes);

  // The whole layer, forward + backward, with the weight gradients added and written, in interleaved rounds.
  const char* names[2] = {"layer, dW added (later micro-batches)", "layer, dW written (first micro-batch)"};
  double best[2] = {1e30, 1e30}, worst[2] = {0, 0};
  for (int round = 0; round < 3; ++round)
    for (int written = 0; written < 2; ++written) {
      const double ms = testing::mean_gpu_ms([&] {
        Stash stash;
        forward(l, stash);
        backward(l, /*accumulate=*/written == 0, stash);
      });
      best[written] = std::min(best[written], ms);
      worst[written] = std::max(worst[written], ms);
    }
  for (int written = 0; written < 2; ++written) {
    report(names[written], best[written], kLayerFlops, 0);
    std::printf("  %-34s (slowest round %.3f ms)\n", "", worst[written]);
  }
}

class MoeLayerSpeedGpu : public testing::GpuTest {};

TEST_F(MoeLayerSpeedGpu, DISABLED_TimesQwen3Layer) {
  for (const double skew : {0.7, 0.0, 2.0}) time_layer(skew);
}

}  // namespace
}  // namespace moetune
