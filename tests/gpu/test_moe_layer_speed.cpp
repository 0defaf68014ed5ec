// Not a check: the speed of one MoE layer on the GPU, forward + backward at 8192 tokens, piece by piece and
// whole, in the order model/cuda/moe_block.cpp runs the ops. Two layers: Qwen3-30B-A3B's (issue 11: 128 experts x
// 768, hidden 2048, top-8, softmax router renormalised over the 8, aux loss on) and Moonlight-16B-A3B's (issue
// 14: 64 experts x 1408, top-6, DeepSeek-V3's sigmoid router with one group, renormalised, x 2.446, no aux loss,
// and 2 shared experts of 1408 run as one 2816-wide SwiGLU MLP over every token). Run with
//   moetune_tests --gtest_also_run_disabled_tests --gtest_filter='MoeLayerSpeedGpu.*'
// Routing is real (the router GEMM and top-k run on the layer's input) and made as skewed as wanted: the input's
// last channel is a constant and the router's column for it a fixed per-expert bias times `skew`, beside
// unit-variance noise logits: on Qwen3's layer skew 0 is near-balanced (max/mean expert load 1.2 on the H200),
// 0.7 gave 11.5 (the reference job's random model sends 3.7-15.5 from its second layer on) and 2.0 gave 16 (57
// experts without rows). Each piece is timed alone (3 warm-up runs, then the mean of 20 back to back), the
// weight gradients both added (a later micro-batch) and written (a step's first micro-batch). The whole layer
// (weight gradients written, no synchronisation inside it) runs in main 149f4d5's order and in the engine's,
// where SwiGLU's backward recomputes the activation in the same pass; five interleaved rounds (the clocks
// drift as the GPU warms), the best round reported. (The shared experts' backward is the engine's,
// model/cuda/swiglu_mlp.h, in both.) Session 7 also ran the shared experts on a second stream beside the routed
// ones, at default and high priority: no gain beyond the rounds' noise, so the engine keeps one stream
// (docs/benchmarks.md, issue 14). The grouped GEMMs' kernels were chosen with an earlier version of this
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
#include "moetune/model/cuda/swiglu_mlp.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/activation.h"
#include "moetune/ops/cuda/aux_loss.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/grouped_gemm.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/cuda/permute.h"
#include "moetune/ops/cuda/router.h"
#include "moetune/ops/cuda/sigmoid_router.h"

namespace moetune {
namespace {

using testing::random_normal;

const Device kGpu = Device::cuda();
constexpr double kEps = 1e-6, kAuxScale = 1e-3;

struct LayerShape {
  const char* name;
  int64_t tokens, hidden, experts, inner, top_k;
  int64_t shared_inner;  // the shared experts' width together; 0: none
  bool sigmoid_router;   // DeepSeek-V3's router (no aux loss), else softmax top-k renormalised + the aux loss
  int64_t rows() const { return tokens * top_k; }
  ops::GroupLimitedRouter group_limited() const { return {top_k, 1, 1, /*renormalize=*/true, 2.446}; }
};
constexpr LayerShape kQwen3{"Qwen3-30B-A3B", 8192, 2048, 128, 768, 8, 0, false};
constexpr LayerShape kMoonlight{"Moonlight-16B-A3B", 8192, 2048, 64, 1408, 6, 2816, true};

Tensor gpu_empty(Shape shape, DType dtype = DType::BF16) { return Tensor::empty(std::move(shape), dtype, kGpu); }

struct MoeLayer {
  LayerShape shape;
  Tensor h, norm_weight, router, gate_up, down;                     // inputs and parameters
  Tensor norm_grad, router_grad, gate_up_grad, down_grad, dout;     // gradients and the layer's output gradient
  Tensor aux_counts, aux_prob_sums;                                 // the step's aux sums over layers
  model::SwigluParams shared;                                              // the shared experts (undefined: none)
};

// [experts, ...] of one expert's weights (drawing 200 M values on the host would take most of a minute; the
// GEMMs' speed does not depend on the values).
Tensor expert_copies(const Tensor& one, int64_t experts) {
  Shape shape = one.shape();
  shape[0] = experts;
  Tensor all = Tensor::empty(shape, one.dtype(), kGpu);
  for (int64_t e = 0; e < experts; ++e) all.narrow(e, 1).copy_from(one);
  return all;
}

Tensor device_copy(const Tensor& t) {
  Tensor copy = Tensor::empty(t.shape(), t.dtype(), kGpu);
  copy.copy_from(t);
  return copy;
}

model::Param trained(Tensor value) {
  Tensor grad = Tensor::zeros(value.shape(), value.dtype(), kGpu);
  return {std::move(value), std::move(grad)};
}

// h: unit normal with a constant last channel; router: noise of unit logit variance plus skew x a per-expert bias
// on that channel.
MoeLayer make_layer(const LayerShape& L, double skew, std::mt19937& rng) {
  MoeLayer l;
  l.shape = L;
  const int64_t H = L.hidden, E = L.experts;
  Tensor h = random_normal({L.tokens, H}, DType::F32, Device::cpu(), rng);
  for (int64_t t = 0; t < L.tokens; ++t) h.data<float>()[t * H + H - 1] = 1.0f;
  const float noise = float(1 / std::sqrt(double(H)));  // unit-variance logits from unit-RMS inputs
  Tensor router = random_normal({E, H}, DType::F32, Device::cpu(), rng, noise);
  std::normal_distribution<float> normal;
  for (int64_t e = 0; e < E; ++e) router.data<float>()[e * H + H - 1] = float(skew) * normal(rng);
  l.h = ops::cast(h, DType::BF16).to(kGpu);
  l.router = ops::cast(router, DType::BF16).to(kGpu);
  l.norm_weight = ops::cast(Tensor::from_vector(std::vector<float>(H, 1.0f), {H}), DType::BF16).to(kGpu);
  l.gate_up = expert_copies(random_normal({1, 2 * L.inner, H}, DType::BF16, kGpu, rng, 0.02f), E);
  l.down = expert_copies(random_normal({1, H, L.inner}, DType::BF16, kGpu, rng, 0.02f), E);
  l.dout = random_normal({L.tokens, H}, DType::BF16, kGpu, rng, 1e-3f);
  l.norm_grad = Tensor::zeros({H}, DType::BF16, kGpu);
  l.router_grad = Tensor::zeros(l.router.shape(), DType::BF16, kGpu);
  l.gate_up_grad = Tensor::zeros(l.gate_up.shape(), DType::BF16, kGpu);
  l.down_grad = Tensor::zeros(l.down.shape(), DType::BF16, kGpu);
  l.aux_counts = Tensor::zeros({E}, DType::F32, kGpu);
  l.aux_prob_sums = Tensor::zeros({E}, DType::F32, kGpu);
  if (L.shared_inner > 0) {
    l.shared.gate_up = trained(random_normal({2 * L.shared_inner, H}, DType::BF16, kGpu, rng, 0.02f));
    l.shared.down = trained(random_normal({H, L.shared_inner}, DType::BF16, kGpu, rng, 0.02f));
  }
  return l;
}

// What the forward keeps for the backward (as MoeBlock stashes it) and what the pieces' timings reuse.
struct Stash {
  Tensor normed, logits, expert_ids, weights, counts, prob_sums, rows, gate_up_out, activated, expert_out, out;
  Tensor shared_gate_up, shared_out;
  ops::cuda::DevicePermutation plan;
};

void route(const MoeLayer& l, Stash& s) {
  const LayerShape& L = l.shape;
  s.logits = gpu_empty({L.tokens, L.experts}, DType::F32);
  ops::cuda::matmul(s.normed, false, l.router, true, s.logits);
  s.expert_ids = gpu_empty({L.tokens, L.top_k}, DType::I32);
  s.weights = gpu_empty({L.tokens, L.top_k}, DType::F32);
  if (L.sigmoid_router)
    ops::cuda::sigmoid_router_forward(s.logits, {}, L.group_limited(), s.expert_ids, s.weights);
  else
    ops::cuda::router_topk_forward(s.logits, L.top_k, /*normalize=*/true, s.expert_ids, s.weights);
  s.counts = Tensor::zeros({L.experts}, DType::F32, kGpu);
  s.prob_sums = Tensor::zeros({L.experts}, DType::F32, kGpu);
  ops::cuda::aux_loss_accumulate(s.logits, s.expert_ids, {}, s.counts, s.prob_sums);
  if (L.sigmoid_router) return;  // the counts are telemetry only: no aux loss
  ops::cuda::add(l.aux_counts, s.counts, l.aux_counts);
  ops::cuda::add(l.aux_prob_sums, s.prob_sums, l.aux_prob_sums);
}

void shared_forward(const MoeLayer& l, Stash& s) {
  s.shared_out = gpu_empty(l.h.shape());
  s.shared_gate_up = model::cuda::swiglu_mlp(s.normed, l.shared, s.shared_out);
}

void forward(const MoeLayer& l, Stash& s) {
  const LayerShape& L = l.shape;
  const bool shared = l.shared.defined();
  s.normed = gpu_empty({L.tokens, L.hidden});
  ops::cuda::rms_norm_forward(l.h, l.norm_weight, kEps, s.normed);
  route(l, s);
  s.plan = ops::cuda::plan_permutation(s.expert_ids, L.experts);
  s.rows = gpu_empty({L.rows(), L.hidden});
  ops::cuda::permute_tokens(s.normed, s.plan, s.rows);
  if (shared) shared_forward(l, s);
  s.gate_up_out = gpu_empty({L.rows(), 2 * L.inner});
  ops::cuda::grouped_matmul(s.rows, l.gate_up, true, s.plan.offsets, s.gate_up_out);
  s.activated = gpu_empty({L.rows(), L.inner});
  ops::cuda::swiglu_forward(s.gate_up_out, s.activated);
  s.expert_out = gpu_empty({L.rows(), L.hidden});
  ops::cuda::grouped_matmul(s.activated, l.down, true, s.plan.offsets, s.expert_out);
  s.activated = Tensor();
  s.out = gpu_empty({L.tokens, L.hidden});
  ops::cuda::combine_experts(s.expert_out, s.plan, s.weights, s.out, l.h);
  if (!shared) return;
  ops::cuda::add(s.out, s.shared_out, s.out);
  s.shared_out = Tensor();
}

void router_backward(const MoeLayer& l, const Stash& s, const Tensor& dweights, const Tensor& dlogits) {
  const LayerShape& L = l.shape;
  if (L.sigmoid_router) {
    ops::cuda::sigmoid_router_backward(s.logits, s.expert_ids, dweights, L.group_limited(), dlogits);
    return;
  }
  ops::cuda::router_topk_backward(s.logits, s.expert_ids, s.weights, dweights, true, dlogits);
  ops::cuda::aux_loss_backward(s.logits, {}, l.aux_counts, double(L.tokens), kAuxScale, dlogits);
}

// How the whole layer runs.
struct Order {
  bool accumulate;   // the weight gradients added to (a later micro-batch), else written (a step's first)
  bool fused;        // down's dX first, then SwiGLU's backward recomputing the activation over d(activated) in
                     // the same pass (the engine's order), else the activation recomputed apart first
};

void backward(const MoeLayer& l, const Stash& s, const Order& order) {
  const bool accumulate = order.accumulate;
  const LayerShape& L = l.shape;
  const int64_t R = L.rows(), T = L.tokens, H = L.hidden;
  const bool shared = l.shared.defined();
  Tensor dexpert_out = gpu_empty({R, H});
  Tensor dweights = gpu_empty({T, L.top_k}, DType::F32);
  ops::cuda::combine_experts_backward(l.dout, s.expert_out, s.plan, s.weights, dexpert_out, dweights);
  if (!order.fused) {
    Tensor activated = gpu_empty({R, L.inner});
    ops::cuda::swiglu_forward(s.gate_up_out, activated);
    ops::cuda::grouped_matmul_weight_grad(dexpert_out, activated, s.plan.offsets, l.down_grad, accumulate);
  }
  Tensor dactivated = gpu_empty({R, L.inner});
  ops::cuda::grouped_matmul(dexpert_out, l.down, false, s.plan.offsets, dactivated);
  Tensor dgate_up = gpu_empty({R, 2 * L.inner});
  ops::cuda::swiglu_backward(dactivated, s.gate_up_out, dgate_up, order.fused ? dactivated : Tensor());
  if (order.fused)
    ops::cuda::grouped_matmul_weight_grad(dexpert_out, dactivated, s.plan.offsets, l.down_grad, accumulate);
  dexpert_out = dactivated = Tensor();
  ops::cuda::grouped_matmul_weight_grad(dgate_up, s.rows, s.plan.offsets, l.gate_up_grad, accumulate);
  Tensor drows = gpu_empty({R, H});
  ops::cuda::grouped_matmul(dgate_up, l.gate_up, false, s.plan.offsets, drows);
  dgate_up = Tensor();
  Tensor normed = gpu_empty({T, H});
  ops::cuda::rms_norm_forward(l.h, l.norm_weight, kEps, normed);
  Tensor dnormed = gpu_empty({T, H});
  ops::cuda::permute_tokens_backward(drows, s.plan, dnormed);
  drows = Tensor();
  Tensor dlogits = gpu_empty({T, L.experts}, DType::F32);
  router_backward(l, s, dweights, dlogits);
  Tensor dlogits_bf16 = gpu_empty({T, L.experts});
  ops::cast_into(dlogits, dlogits_bf16);
  ops::cuda::linear_backward(dlogits_bf16, normed, l.router, dnormed, l.router_grad, {}, /*accumulate_dx=*/true);
  if (shared) model::cuda::swiglu_mlp_backward(l.dout, normed, s.shared_gate_up, l.shared, dnormed, true);
  Tensor dh = gpu_empty({T, H});
  ops::cuda::rms_norm_backward(dnormed, l.h, l.norm_weight, kEps, dh, l.norm_grad, l.dout);
}

// The layer's model FLOPs as bench/moe_layer_tflops.py counts them: the router GEMM, the experts' three GEMMs
// per chosen expert and the shared experts' three, forward, and twice that backward.
double routed_gemm_flops(const LayerShape& L) { return 2.0 * double(L.rows()) * double(L.hidden) * double(L.inner); }  // one projection
double shared_gemm_flops(const LayerShape& L) { return 2.0 * double(L.tokens) * double(L.hidden) * double(L.shared_inner); }
double router_flops(const LayerShape& L) { return 2.0 * double(L.tokens) * double(L.hidden) * double(L.experts); }
double layer_flops(const LayerShape& L) {
  return 3 * (router_flops(L) + 3 * routed_gemm_flops(L) + 3 * shared_gemm_flops(L));
}

struct Piece {
  std::string name;
  double flops, bytes;  // bytes: what a memory-bound kernel must move at least (0 for GEMMs)
  std::function<void()> run;
};

void report(const char* what, double ms, double flops, double bytes) {
  std::printf("  %-40s %8.3f ms", what, ms);
  if (flops > 0) std::printf("  %6.0f TFLOP/s", flops / ms / 1e9);
  if (bytes > 0) std::printf("  %6.2f TB/s (%.0f MB)", bytes / ms / 1e9, bytes / 1e6);
  std::printf("\n");
}

void time_layer(const LayerShape& L, double skew) {
  std::mt19937 rng(1234);
  MoeLayer l = make_layer(L, skew, rng);
  Stash s;
  forward(l, s);
  const Tensor offsets = s.plan.offsets.to(Device::cpu());
  int64_t largest = 0, empty = 0;
  for (int64_t e = 0; e < L.experts; ++e) {
    const int64_t count = offsets.data<int32_t>()[e + 1] - offsets.data<int32_t>()[e];
    largest = std::max(largest, count);
    empty += count == 0;
  }
  std::printf("\n%s MoE layer, %lld tokens, skew %.1f: max/mean expert load %.1f (largest %lld rows), "
              "%lld experts without rows\n",
              L.name, (long long)L.tokens, skew, double(largest) / (double(L.rows()) / double(L.experts)), (long long)largest,
              (long long)empty);

  const int64_t T = L.tokens, H = L.hidden, E = L.experts, k = L.top_k, R = L.rows(), I = L.inner;
  // Inputs and outputs of the backward pieces, made once.
  // (Copies of the forward's rows stand in for gradients of the same shapes.)
  Tensor dexpert_out = device_copy(s.rows);
  Tensor dweights = gpu_empty({T, k}, DType::F32);
  Tensor activated = gpu_empty({R, I});
  ops::cuda::swiglu_forward(s.gate_up_out, activated);
  Tensor dactivated = device_copy(activated);
  Tensor dgate_up = gpu_empty({R, 2 * I}), drows = gpu_empty({R, H});
  Tensor dnormed = gpu_empty({T, H}), dh = gpu_empty({T, H});
  Tensor dlogits = gpu_empty({T, E}, DType::F32), dlogits_bf16 = gpu_empty({T, E});
  ops::cuda::swiglu_backward(dactivated, s.gate_up_out, dgate_up);
  const Tensor offs = s.plan.offsets;
  const double bf = 2, f32 = 4;  // bytes per element
  const double TH = double(T) * double(H), RH = double(R) * double(H), RI = double(R) * double(I);
  const double G = routed_gemm_flops(L);
  // Tensors are shared handles: the pieces hold copies.
  const auto gg = [offs](Tensor x, Tensor w, bool t, Tensor out) {
    return [=] { ops::cuda::grouped_matmul(x, w, t, offs, out); };
  };
  const auto wg = [offs](bool accumulate, Tensor dy, Tensor x, Tensor dw) {
    return [=] { ops::cuda::grouped_matmul_weight_grad(dy, x, offs, dw, accumulate); };
  };
  std::vector<Piece> pieces = {
      {"rms_norm", 0, 2 * TH * bf, [&] { ops::cuda::rms_norm_forward(l.h, l.norm_weight, kEps, s.normed); }},
      {"router GEMM, top-k, counts (+ aux sums)", 0, 0, [&] { route(l, s); }},
      {"permutation plan", 0, 0, [&] { (void)ops::cuda::plan_permutation(s.expert_ids, E); }},
      {"permute rows", 0, RH * bf + TH * bf, [&] { ops::cuda::permute_tokens(s.normed, s.plan, s.rows); }},
      {"gate_up forward", 2 * G, 0, gg(s.rows, l.gate_up, true, s.gate_up_out)},
      {"swiglu", 0, 3 * RI * bf, [&] { ops::cuda::swiglu_forward(s.gate_up_out, activated); }},
      {"down forward", G, 0, gg(activated, l.down, true, s.expert_out)},
      {"combine", 0, RH * bf + 2 * TH * bf,
       [&] { ops::cuda::combine_experts(s.expert_out, s.plan, s.weights, s.out, l.h); }},
      {"combine backward", 0, 2 * RH * bf + TH * bf,
       [&] { ops::cuda::combine_experts_backward(l.dout, s.expert_out, s.plan, s.weights, dexpert_out, dweights); }},
      {"swiglu (recomputed)", 0, 3 * RI * bf, [&] { ops::cuda::swiglu_forward(s.gate_up_out, activated); }},
      {"down dW +=", G, 0, wg(true, dexpert_out, activated, l.down_grad)},
      {"down dW =", G, 0, wg(false, dexpert_out, activated, l.down_grad)},
      {"down dX", G, 0, gg(dexpert_out, l.down, false, dactivated)},
      {"swiglu backward", 0, 5 * RI * bf, [&] { ops::cuda::swiglu_backward(dactivated, s.gate_up_out, dgate_up); }},
      {"swiglu backward + recomputed (1 pass)", 0, 6 * RI * bf,
       [&] { ops::cuda::swiglu_backward(dactivated, s.gate_up_out, dgate_up, activated); }},
      {"gate_up dW +=", 2 * G, 0, wg(true, dgate_up, s.rows, l.gate_up_grad)},
      {"gate_up dW =", 2 * G, 0, wg(false, dgate_up, s.rows, l.gate_up_grad)},
      {"gate_up dX", 2 * G, 0, gg(dgate_up, l.gate_up, false, drows)},
      {"rms_norm (recomputed)", 0, 2 * TH * bf,
       [&] { ops::cuda::rms_norm_forward(l.h, l.norm_weight, kEps, s.normed); }},
      {"permute backward", 0, RH * bf + TH * bf, [&] { ops::cuda::permute_tokens_backward(drows, s.plan, dnormed); }},
      {"router backward (+aux), cast", 0, 3 * double(T) * double(E) * f32,
       [&] {
         router_backward(l, s, dweights, dlogits);
         ops::cast_into(dlogits, dlogits_bf16);
       }},
      {"router GEMM backward", 2 * router_flops(L), 0,
       [&] { ops::cuda::linear_backward(dlogits_bf16, s.normed, l.router, dnormed, l.router_grad, {}, true); }},
      {"rms_norm backward", 0, 4 * TH * bf,
       [&] { ops::cuda::rms_norm_backward(dnormed, l.h, l.norm_weight, kEps, dh, l.norm_grad, l.dout); }},
  };
  Tensor one_group;  // offsets of one group over every token: the shared experts' product as a grouped GEMM
  if (l.shared.defined()) {
    const double S = shared_gemm_flops(L);
    one_group = Tensor::from_vector(std::vector<int32_t>{0, int32_t(T)}, {2}).to(kGpu);
    const Tensor shared_gate_up_out = gpu_empty({T, 2 * L.shared_inner});
    pieces.push_back({"shared gate_up GEMM (cuBLASLt)", 2 * S, 0, [&, shared_gate_up_out] {
                        ops::cuda::linear_forward(s.normed, l.shared.gate_up.value, {}, shared_gate_up_out);
                      }});
    pieces.push_back({"shared gate_up GEMM (grouped, 1 group)", 2 * S, 0, [&, shared_gate_up_out] {
                        ops::cuda::grouped_matmul(s.normed, l.shared.gate_up.value.view({1, 2 * L.shared_inner, H}),
                                                  true, one_group, shared_gate_up_out);
                      }});
    pieces.push_back({"shared experts forward (3 GEMMs, swiglu)", 3 * S, 0, [&] { shared_forward(l, s); }});
    pieces.push_back({"shared experts backward (6 GEMMs, swiglu x2)", 6 * S, 0, [&] {
                        model::cuda::swiglu_mlp_backward(l.dout, s.normed, s.shared_gate_up, l.shared, dnormed, true);
                      }});
  }
  // The same routed products over the same rows as one group (expert 0's weights for every row): what the
  // kernel gives without an expert switch per tile (CUTLASS's grouped scheduler hands each CTA tiles ~132
  // apart, so at ~768 rows an expert nearly every tile starts a new group and its TMA descriptors are
  // rewritten), and the gate_up product as one cuBLASLt GEMM (the dense ceiling at this shape).
  const Tensor all_rows = Tensor::from_vector(std::vector<int32_t>{0, int32_t(R)}, {2}).to(kGpu);
  const Tensor gate_up_0 = l.gate_up.narrow(0, 1), down_0 = l.down.narrow(0, 1);
  pieces.push_back({"gate_up forward, all rows 1 group", 2 * G, 0, [&] {
                      ops::cuda::grouped_matmul(s.rows, gate_up_0, true, all_rows, s.gate_up_out);
                    }});
  pieces.push_back({"gate_up forward, all rows cuBLASLt", 2 * G, 0, [&] {
                      ops::cuda::matmul(s.rows, false, gate_up_0.view({2 * I, H}), true, s.gate_up_out);
                    }});
  pieces.push_back({"down forward, all rows 1 group", G, 0,
                    [&] { ops::cuda::grouped_matmul(activated, down_0, true, all_rows, s.expert_out); }});
  pieces.push_back({"down dX, all rows 1 group", G, 0,
                    [&] { ops::cuda::grouped_matmul(dexpert_out, down_0, false, all_rows, dactivated); }});
  for (const Piece& p : pieces) report(p.name.c_str(), testing::mean_gpu_ms(p.run), p.flops, p.bytes);

  // The whole layer, forward + backward (dW written), in main's order and the engine's, in interleaved rounds.
  struct Variant {
    std::string name;
    Order order;
  };
  const std::vector<Variant> variants = {{"layer, main's order (149f4d5)", {false, false}},
                                         {"layer, swiglu backward recomputing", {false, true}}};
  std::vector<double> best(variants.size(), 1e30), worst(variants.size(), 0);
  for (int round = 0; round < 5; ++round)
    for (size_t v = 0; v < variants.size(); ++v) {
      const double ms = testing::mean_gpu_ms([&] {
        Stash stash;
        forward(l, stash);
        backward(l, stash, variants[v].order);
      });
      best[v] = std::min(best[v], ms);
      worst[v] = std::max(worst[v], ms);
    }
  for (size_t v = 0; v < variants.size(); ++v) {
    report(variants[v].name.c_str(), best[v], layer_flops(L), 0);
    std::printf("  %-40s (slowest round %.3f ms)\n", "", worst[v]);
  }
}

class MoeLayerSpeedGpu : public testing::GpuTest {};

TEST_F(MoeLayerSpeedGpu, DISABLED_TimesQwen3Layer) {
  for (const double skew : {0.7, 0.0, 2.0}) time_layer(kQwen3, skew);
}

TEST_F(MoeLayerSpeedGpu, DISABLED_TimesMoonlightLayer) {
  // The bench's random Moonlight routes with max/mean expert load 1.6-1.9 (its first GPU call of session 7).
  for (const double skew : {0.0, 0.3}) time_layer(kMoonlight, skew);
}

}  // namespace
}  // namespace moetune
