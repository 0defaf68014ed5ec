// DeepSeek-V3's GPU pieces against their CPU references: flash attention with a v head dim below q/k's (the CPU
// op takes one width: v zero-padded to it), MLA's q/k/v assembly with RoPE on the rope columns (ops/mla_rope.h)
// and its transpose, the column copy that pads and narrows heads, and the sigmoid group-limited router
// (ops/sigmoid_router.h). Router inputs are redrawn until no two biased scores or group scores nearly tie, so
// the expert ids must match exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_timing.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/attention.h"
#include "moetune/ops/cuda/attention_graph.h"
#include "moetune/ops/cuda/attention_plans.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/mla_qkv.h"
#include "moetune/ops/cuda/sigmoid_router.h"
#include "moetune/ops/mla_rope.h"
#include "moetune/ops/rope.h"
#include "moetune/ops/sigmoid_router.h"

namespace moetune {
namespace {

using testing::document_starts;
using testing::kBf16Tolerance;
using testing::poisoned;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

const Device kGpu = Device::cuda();

// out[t, h, offset + i] = in[t, h or 0, i] for a host f32 [T, heads_in, n] into [T, heads, width].
void place(const Tensor& out, int64_t offset, const Tensor& in) {
  const int64_t tokens = out.size(0), heads = out.size(1), width = out.size(2), heads_in = in.size(1), n = in.size(2);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < n; ++i)
        out.data<float>()[(t * heads + h) * width + offset + i] = in.data<float>()[(t * heads_in + h % heads_in) * n + i];
}

// [T, heads, n] of columns [offset, offset + n) of a host f32 [T, heads, width].
Tensor take(const Tensor& x, int64_t offset, int64_t n) {
  const int64_t tokens = x.size(0), heads = x.size(1), width = x.size(2);
  Tensor out = Tensor::empty({tokens, heads, n}, DType::F32);
  for (int64_t r = 0; r < tokens * heads; ++r)
    std::copy_n(x.data<float>() + r * width + offset, n, out.data<float>() + r * n);
  return out;
}

class MlaGpu : public testing::GpuTest {};

// ---- flash attention with v's head dim below q/k's ----

struct AttentionCase {
  std::vector<int64_t> lengths;
  int64_t heads, head_dim, v_head_dim;
};

TEST_F(MlaGpu, AttentionWithNarrowerValuesMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const AttentionCase& c : {AttentionCase{{300}, 4, 192, 128}, AttentionCase{{1, 17, 64, 5}, 4, 192, 128},
                                 AttentionCase{{33, 2, 40}, 4, 16, 8}}) {
    SCOPED_TRACE(::testing::Message() << "d " << c.head_dim << ", dv " << c.v_head_dim << ", " << c.lengths.size()
                                      << " documents");
    const std::vector<int64_t> starts = document_starts(c.lengths);
    const int64_t tokens = int64_t(starts.size()), d = c.head_dim, dv = c.v_head_dim;
    const double scale = 0.3 / std::sqrt(double(d));
    const Tensor q = random_normal({tokens, c.heads, d}, DType::BF16, kGpu, rng());
    const Tensor k = random_normal({tokens, c.heads, d}, DType::BF16, kGpu, rng());
    const Tensor v = random_normal({tokens, c.heads, dv}, DType::BF16, kGpu, rng());
    const Tensor dout = random_normal({tokens, c.heads, dv}, DType::BF16, kGpu, rng());

    // The CPU op takes one width: v and dout zero-padded to d.
    const Tensor vf = Tensor::zeros({tokens, c.heads, d}, DType::F32), doutf = Tensor::zeros({tokens, c.heads, d}, DType::F32);
    place(vf, 0, to_cpu_f32(v));
    place(doutf, 0, to_cpu_f32(dout));
    const ops::AttentionMask mask{.document_start = starts};
    const Tensor qf = to_cpu_f32(q), kf = to_cpu_f32(k);
    const Tensor expected_out = ops::causal_attention_forward(qf, kf, vf, mask, scale);
    const ops::AttentionGrads expected = ops::causal_attention_backward(doutf, qf, kf, vf, expected_out, mask, scale);

    const int64_t longest = *std::max_element(c.lengths.begin(), c.lengths.end());
    const ops::cuda::PackedDocuments docs = ops::cuda::pack_documents(starts, longest);
    const Tensor out = poisoned({tokens, c.heads, dv}, DType::BF16, kGpu);
    const Tensor stats = ops::cuda::causal_attention_forward(q, k, v, docs, scale, out);
    const Tensor dq = poisoned(q.shape(), DType::BF16, kGpu), dk = poisoned(k.shape(), DType::BF16, kGpu);
    const Tensor dvv = poisoned(v.shape(), DType::BF16, kGpu);
    ops::cuda::causal_attention_backward(dout, q, k, v, out, stats, docs, scale, dq, dk, dvv);
    EXPECT_LT(relative_error(out, take(expected_out, 0, dv)), kBf16Tolerance);
    EXPECT_LT(relative_error(dq, expected.dq), kBf16Tolerance);
    EXPECT_LT(relative_error(dk, expected.dk), kBf16Tolerance);
    EXPECT_LT(relative_error(dvv, take(expected.dv, 0, dv)), kBf16Tolerance);
  }
}

// Batches whose documents each fill a row run in cuDNN's plain rows layout (BSHD, no offsets, no padding mask);
// packed documents and rows ending in padding (its own document) in the ragged one. Both against the CPU, and
// the engine's rows run against the rows plan built directly (so a silent fall-back to ragged would show).
struct LayoutCase {
  std::vector<int64_t> lengths;
  int64_t bound, heads, kv_heads, head_dim, v_head_dim;
  bool rows;  // whether the documents fill their rows
};

TEST_F(MlaGpu, RowsAndRaggedLayoutsMatchCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  namespace ag = ops::cuda::attention_graph;
  for (const LayoutCase& c : {LayoutCase{{256, 256}, 256, 4, 4, 192, 128, true},
                              LayoutCase{{300}, 300, 4, 4, 192, 128, true},
                              LayoutCase{{136, 136, 136}, 136, 8, 2, 128, 128, true},
                              LayoutCase{{200, 56, 256}, 256, 4, 4, 192, 128, false},  // a row ending in padding
                              LayoutCase{{100, 28, 128, 1, 127}, 128, 4, 4, 192, 128, false}}) {  // packed
    SCOPED_TRACE(::testing::Message() << c.lengths.size() << " documents, bound " << c.bound << ", heads " << c.heads
                                      << "/" << c.kv_heads << ", d " << c.head_dim << ", dv " << c.v_head_dim);
    const std::vector<int64_t> starts = document_starts(c.lengths);
    const int64_t tokens = int64_t(starts.size()), d = c.head_dim, dv = c.v_head_dim;
    const double scale = 0.3 / std::sqrt(double(d));
    const ops::cuda::AttentionTensors t{
        .q = random_normal({tokens, c.heads, d}, DType::BF16, kGpu, rng()),
        .k = random_normal({tokens, c.kv_heads, d}, DType::BF16, kGpu, rng()),
        .v = random_normal({tokens, c.kv_heads, dv}, DType::BF16, kGpu, rng()),
        .out = poisoned({tokens, c.heads, dv}, DType::BF16, kGpu),
        .stats = Tensor(),
        .dout = random_normal({tokens, c.heads, dv}, DType::BF16, kGpu, rng()),
        .dq = poisoned({tokens, c.heads, d}, DType::BF16, kGpu),
        .dk = poisoned({tokens, c.kv_heads, d}, DType::BF16, kGpu),
        .dv = poisoned({tokens, c.kv_heads, dv}, DType::BF16, kGpu)};

    // The CPU op takes one width and equal head counts: v and dout zero-padded to d, k and v repeated per head.
    const Tensor kf = Tensor::zeros({tokens, c.heads, d}, DType::F32), vf = Tensor::zeros({tokens, c.heads, d}, DType::F32);
    const Tensor doutf = Tensor::zeros({tokens, c.heads, d}, DType::F32);
    const int64_t group = c.heads / c.kv_heads;
    const Tensor k_host = to_cpu_f32(t.k), v_host = to_cpu_f32(t.v);
    for (int64_t tok = 0; tok < tokens; ++tok)
      for (int64_t h = 0; h < c.heads; ++h) {
        std::copy_n(k_host.data<float>() + (tok * c.kv_heads + h / group) * d, d, kf.data<float>() + (tok * c.heads + h) * d);
        std::copy_n(v_host.data<float>() + (tok * c.kv_heads + h / group) * dv, dv, vf.data<float>() + (tok * c.heads + h) * d);
      }
    place(doutf, 0, to_cpu_f32(t.dout));
    const ops::AttentionMask mask{.document_start = starts};
    const Tensor qf = to_cpu_f32(t.q);
    const Tensor expected_out = ops::causal_attention_forward(qf, kf, vf, mask, scale);
    const ops::AttentionGrads expected = ops::causal_attention_backward(doutf, qf, kf, vf, expected_out, mask, scale);
    // dk and dv per kv head: the sum over the heads of its group.
    const Tensor expected_dk = Tensor::zeros({tokens, c.kv_heads, d}, DType::F32);
    const Tensor expected_dv = Tensor::zeros({tokens, c.kv_heads, dv}, DType::F32);
    for (int64_t tok = 0; tok < tokens; ++tok)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int64_t i = 0; i < d; ++i) {
          const int64_t from = (tok * c.heads + h) * d + i, kv = tok * c.kv_heads + h / group;
          expected_dk.data<float>()[kv * d + i] += expected.dk.data<float>()[from];
          if (i < dv) expected_dv.data<float>()[kv * dv + i] += expected.dv.data<float>()[from];
        }

    const ops::cuda::PackedDocuments docs = ops::cuda::pack_documents(starts, c.bound);
    const Tensor stats = ops::cuda::causal_attention_forward(t.q, t.k, t.v, docs, scale, t.out);
    ops::cuda::causal_attention_backward(t.dout, t.q, t.k, t.v, t.out, stats, docs, scale, t.dq, t.dk, t.dv);
    EXPECT_LT(relative_error(t.out, take(expected_out, 0, dv)), kBf16Tolerance);
    EXPECT_LT(relative_error(t.dq, expected.dq), kBf16Tolerance);
    EXPECT_LT(relative_error(t.dk, expected_dk), kBf16Tolerance);
    EXPECT_LT(relative_error(t.dv, expected_dv), kBf16Tolerance);

    // The plan the engine should have run, built directly: its forward output must be the engine's, bit for bit.
    const int64_t rows = int64_t(c.lengths.size());
    const ag::GraphKey key = c.rows ? ag::rows_key(false, c.heads, c.kv_heads, d, dv, rows, c.bound, 0)
                                    : ag::ragged_key(false, tokens, c.heads, c.kv_heads, d, dv, rows, c.bound, 0);
    const ops::cuda::AttentionPlans plans(key, ops::cuda::PlanSource::kHeuristicA);
    ASSERT_GT(plans.count(), 0);
    ASSERT_EQ(plans.error(0), "") << plans.label(0);
    ops::cuda::AttentionTensors direct = t;
    direct.out = poisoned(t.out.shape(), DType::BF16, kGpu);
    direct.stats = Tensor::empty(stats.shape(), DType::F32, kGpu);
    plans.run(0, direct, docs, scale);
    EXPECT_EQ(relative_error(direct.out, to_cpu_f32(t.out)), 0.0) << plans.label(0);
    EXPECT_EQ(relative_error(direct.stats, to_cpu_f32(stats)), 0.0) << plans.label(0);
  }
}

// One variant of the attention graph and where its plans come from, for the studies below.
struct PlanJob {
  size_t width;  // 0: q/k 192, v 128 (Moonlight); 1: 128 / 128
  bool backward;
  ops::cuda::attention_graph::Layout layout;
  bool padding_mask = false, max_total_seq_len = false, deterministic = false;
  ops::cuda::PlanSource source = ops::cuda::PlanSource::kHeuristicA;
};

// Builds and times the plans of each job in turn (16 heads, two rows of 4096 tokens, one document each), each
// plan's outputs compared with the ragged heuristic-A plan's; no new job starts after budget_seconds.
void study_attention_plans(std::mt19937& rng, const std::vector<PlanJob>& jobs, double budget_seconds) {
  namespace ag = ops::cuda::attention_graph;
  using ops::cuda::PlanSource;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line out even if the run is cut short
  constexpr int64_t kRows = 2, kLength = 4096, kHeads = 16, kTokens = kRows * kLength;
  const auto begin = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count(); };
  const ops::cuda::PackedDocuments docs = ops::cuda::pack_documents(document_starts({kLength, kLength}), kLength);

  // Per width: the tensors, and the ragged heuristic-A plans' outputs as the reference.
  struct Width {
    int64_t d, dv;
    ops::cuda::AttentionTensors t;
    Tensor out, dq, dk, dv_ref;  // host copies
  };
  std::vector<Width> widths;
  for (const auto& [d, dv] : {std::pair<int64_t, int64_t>{192, 128}, std::pair<int64_t, int64_t>{128, 128}}) {
    Width w{d, dv,
            {.q = random_normal({kTokens, kHeads, d}, DType::BF16, kGpu, rng),
             .k = random_normal({kTokens, kHeads, d}, DType::BF16, kGpu, rng),
             .v = random_normal({kTokens, kHeads, dv}, DType::BF16, kGpu, rng),
             .out = Tensor::empty({kTokens, kHeads, dv}, DType::BF16, kGpu),
             .stats = Tensor::empty({kTokens, kHeads}, DType::F32, kGpu),
             .dout = random_normal({kTokens, kHeads, dv}, DType::BF16, kGpu, rng),
             .dq = Tensor::empty({kTokens, kHeads, d}, DType::BF16, kGpu),
             .dk = Tensor::empty({kTokens, kHeads, d}, DType::BF16, kGpu),
             .dv = Tensor::empty({kTokens, kHeads, dv}, DType::BF16, kGpu)},
            {}, {}, {}, {}};
    for (const bool backward : {false, true})
      ops::cuda::AttentionPlans(ag::ragged_key(backward, kTokens, kHeads, kHeads, d, dv, kRows, kLength, 0),
                                PlanSource::kHeuristicA)
          .run(0, w.t, docs, 0.07);
    w.out = to_cpu_f32(w.t.out), w.dq = to_cpu_f32(w.t.dq), w.dk = to_cpu_f32(w.t.dk), w.dv_ref = to_cpu_f32(w.t.dv);
    widths.push_back(std::move(w));
  }

  for (const PlanJob& job : jobs) {
    if (seconds() > budget_seconds) {
      std::printf("plans: time budget spent, stopping\n");
      return;
    }
    Width& w = widths[job.width];
    ag::GraphKey key = job.layout == ag::Layout::kRagged
                           ? ag::ragged_key(job.backward, kTokens, kHeads, kHeads, w.d, w.dv, kRows, kLength, 0)
                           : ag::rows_key(job.backward, kHeads, kHeads, w.d, w.dv, kRows, kLength, 0);
    key.layout = job.layout;
    key.padding_mask = job.padding_mask;
    key.max_total_seq_len = job.max_total_seq_len;
    key.deterministic = job.deterministic;
    const double build_start = seconds();
    std::unique_ptr<ops::cuda::AttentionPlans> plans;
    try {
      plans = std::make_unique<ops::cuda::AttentionPlans>(key, job.source);
    } catch (const Error& e) {
      std::printf("plans: %s, %s: refused: %s\n", ag::describe(key).c_str(), ops::cuda::plan_source_name(job.source),
                  e.what());
      continue;
    }
    std::printf("plans: %s, %s: %lld plans (built in %.1f s)\n", ag::describe(key).c_str(),
                ops::cuda::plan_source_name(job.source), (long long)plans->count(), seconds() - build_start);
    for (const std::string& note : plans->notes()) std::printf("plans:   note: %s\n", note.c_str());
    const double forward_flops = 2.0 * double(kHeads * (w.d + w.dv) * kRows) * double(kLength) * double(kLength) / 2;
    for (int64_t i = 0; i < plans->count(); ++i) {
      if (!plans->error(i).empty()) {
        std::printf("plans:   #%lld %s: not built: %.160s\n", (long long)i, plans->label(i).c_str(),
                    plans->error(i).c_str());
        continue;
      }
      ops::cuda::AttentionTensors run = w.t;  // the backward reads the reference forward's out and statistics
      if (!job.backward) run.stats = Tensor::empty(w.t.stats.shape(), DType::F32, kGpu);
      if (!job.backward) run.out = Tensor::empty(w.t.out.shape(), DType::BF16, kGpu);
      double ms = 0;
      try {
        ms = testing::mean_gpu_ms([&] { plans->run(i, run, docs, 0.07); }, 2, 10);
      } catch (const Error& e) {
        std::printf("plans:   #%lld %s: failed: %.200s\n", (long long)i, plans->label(i).c_str(), e.what());
        continue;
      }
      const double difference =
          job.backward ? std::max({relative_error(run.dq, w.dq), relative_error(run.dk, w.dk), relative_error(run.dv, w.dv_ref)})
                       : relative_error(run.out, w.out);
      std::printf("plans:   #%lld %s: %.3f ms, %.0f TFLOP/s, workspace %.1f MB, vs ragged A %.2e\n", (long long)i,
                  plans->label(i).c_str(), ms, (job.backward ? 2.5 : 1.0) * forward_flops / ms / 1e9,
                  double(plans->workspace_bytes(i)) / 1e6, difference);
    }
  }
}

// Not a check: every cuDNN plan for Moonlight's attention (16 heads, q/k 192, v 128; two rows of 4096 tokens, one
// document each) and for q/k 128 beside it, in each layout and option: the ragged layout the engine used before
// (with and without max_total_seq_len), the rows layout (BSHD) and head-major (BHSD) with and without the padding
// mask, the deterministic backward; plans from heuristic mode A, then B and the fallback list, then every engine
// with its knobs. Each line: the plan's time, TFLOP/s (the backward counted as 2.5 forwards, as
// DISABLED_TimesAttentionWidths does), its workspace and its difference from the ragged heuristic-A plan
// (head-major reads the same memory differently, so its difference means nothing). The most telling variants
// come first. Run with --gtest_also_run_disabled_tests.
TEST_F(MlaGpu, DISABLED_TimesAttentionPlans) {
  const auto R = ops::cuda::attention_graph::Layout::kRagged, W = ops::cuda::attention_graph::Layout::kRows,
             H = ops::cuda::attention_graph::Layout::kHeadMajor;
  const auto B = ops::cuda::PlanSource::kHeuristicB, F = ops::cuda::PlanSource::kFallback,
             E = ops::cuda::PlanSource::kEveryEngine;
  study_attention_plans(
      rng(),
      {{0, true, R, true, true}, {0, true, W}, {0, true, W, true}, {0, true, H}, {0, true, H, true},
       {0, true, R, true, false}, {0, true, R, true, true, true}, {0, true, W, false, false, true},
       {0, false, R, true}, {0, false, W}, {0, false, W, true}, {0, false, H}, {0, false, H, true},
       {1, true, R, true, true}, {1, true, W}, {1, false, R, true}, {1, false, W},
       {0, true, R, true, true, false, B}, {0, true, R, true, true, false, F}, {0, true, W, false, false, false, B},
       {0, true, W, false, false, false, F}, {0, false, W, false, false, false, B},
       {0, true, W, false, false, false, E}, {0, true, R, true, true, false, E}, {0, false, W, false, false, false, E}},
      70);
}

// Not a check: Moonlight's attention backward in the rows layout the engine runs, every engine and knob
// combination cuDNN builds for it (its heuristics offer one configuration). The forward's sweep is left out: its
// 22 plans took 27.5 s to build on the H200 (session 7). Run with --gtest_also_run_disabled_tests.
TEST_F(MlaGpu, DISABLED_TimesAttentionKernelConfigs) {
  const auto W = ops::cuda::attention_graph::Layout::kRows;
  const auto E = ops::cuda::PlanSource::kEveryEngine;
  study_attention_plans(rng(), {{0, true, W, false, false, false, E}}, 30);
}

// Not a check: cuDNN's attention forward + backward at Moonlight's widths (16 heads, q/k 192, v 128; two
// documents of 4096) beside the same with q/k 128 and Qwen3-MoE's (32 heads, 4 kv heads, 128), to see what the
// wider q/k costs. Run with --gtest_also_run_disabled_tests.
TEST_F(MlaGpu, DISABLED_TimesAttentionWidths) {
  struct Shape {
    int64_t heads, kv_heads, d, dv;
  };
  const std::vector<int64_t> starts = document_starts({4096, 4096});
  const ops::cuda::PackedDocuments docs = ops::cuda::pack_documents(starts, 4096);
  const int64_t tokens = int64_t(starts.size());
  for (const Shape& c : {Shape{16, 16, 192, 128}, Shape{16, 16, 128, 128}, Shape{32, 4, 128, 128}, Shape{16, 16, 192, 192}}) {
    const Tensor q = random_normal({tokens, c.heads, c.d}, DType::BF16, kGpu, rng());
    const Tensor k = random_normal({tokens, c.kv_heads, c.d}, DType::BF16, kGpu, rng());
    const Tensor v = random_normal({tokens, c.kv_heads, c.dv}, DType::BF16, kGpu, rng());
    const Tensor dout = random_normal({tokens, c.heads, c.dv}, DType::BF16, kGpu, rng());
    const Tensor out = Tensor::empty({tokens, c.heads, c.dv}, DType::BF16, kGpu);
    const Tensor dq = Tensor::empty(q.shape(), DType::BF16, kGpu), dk = Tensor::empty(k.shape(), DType::BF16, kGpu);
    const Tensor dvv = Tensor::empty(v.shape(), DType::BF16, kGpu);
    double forward_ms = 0, backward_ms = 0;
    for (int i = 0; i < 7; ++i) {
      gpu::synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor stats = ops::cuda::causal_attention_forward(q, k, v, docs, 0.07, out);
      gpu::synchronize();
      const auto t1 = std::chrono::steady_clock::now();
      ops::cuda::causal_attention_backward(dout, q, k, v, out, stats, docs, 0.07, dq, dk, dvv);
      gpu::synchronize();
      const auto t2 = std::chrono::steady_clock::now();
      if (i < 2) continue;  // graph building and warm-up
      forward_ms += std::chrono::duration<double, std::milli>(t1 - t0).count() / 5;
      backward_ms += std::chrono::duration<double, std::milli>(t2 - t1).count() / 5;
    }
    // Causal: half the score matrix of each document.
    const double flops = 2.0 * double(c.heads) * double(c.d + c.dv) * 2 * 4096.0 * 4096.0 / 2;
    std::printf("attention heads %lld/%lld d %lld dv %lld: forward %.3f ms (%.0f TFLOP/s), backward %.3f ms (%.0f TFLOP/s)\n",
                (long long)c.heads, (long long)c.kv_heads, (long long)c.d, (long long)c.dv, forward_ms,
                flops / forward_ms / 1e9, backward_ms, 2.5 * flops / backward_ms / 1e9);
  }
}

// Not a check: kv_a_proj_with_mqa (576 rows at Moonlight's widths) as one GEMM beside two (512 + 64 rows, what
// the block runs so that c and k_rope come out contiguous), forward and backward, 8192 tokens. Run with
// --gtest_also_run_disabled_tests.
TEST_F(MlaGpu, DISABLED_TimesKvAProjection) {
  const int64_t T = 8192, hidden = 2048, latent = 512, rope = 64;
  const Tensor x = random_normal({T, hidden}, DType::BF16, kGpu, rng(), 0.1f);
  const Tensor w = random_normal({latent + rope, hidden}, DType::BF16, kGpu, rng(), 0.02f);
  const Tensor dw = Tensor::zeros(w.shape(), DType::BF16, kGpu), dx = Tensor::empty({T, hidden}, DType::BF16, kGpu);
  const Tensor y = Tensor::empty({T, latent + rope}, DType::BF16, kGpu);
  const Tensor dy = random_normal({T, latent + rope}, DType::BF16, kGpu, rng());
  const Tensor y_latent = Tensor::empty({T, latent}, DType::BF16, kGpu), y_rope = Tensor::empty({T, rope}, DType::BF16, kGpu);
  const Tensor dy_latent = random_normal({T, latent}, DType::BF16, kGpu, rng()), dy_rope = random_normal({T, rope}, DType::BF16, kGpu, rng());
  const auto time_ms = [](const std::function<void()>& run) { return testing::mean_gpu_ms(run); };
  const double one_forward = time_ms([&] { ops::cuda::linear_forward(x, w, {}, y); });
  const double two_forward = time_ms([&] {
    ops::cuda::linear_forward(x, w.narrow(0, latent), {}, y_latent);
    ops::cuda::linear_forward(x, w.narrow(latent, rope), {}, y_rope);
  });
  const double one_backward = time_ms([&] { ops::cuda::linear_backward(dy, x, w, dx, dw); });
  const double two_backward = time_ms([&] {
    ops::cuda::linear_backward(dy_latent, x, w.narrow(0, latent), dx, dw.narrow(0, latent));
    ops::cuda::linear_backward(dy_rope, x, w.narrow(latent, rope), dx, dw.narrow(latent, rope), {}, true);
  });
  std::printf("kv_a (576 x 2048, 8192 tokens): one GEMM forward %.3f ms, backward %.3f ms; as 512 + 64: forward %.3f ms, "
              "backward %.3f ms\n", one_forward, one_backward, two_forward, two_backward);
}

// ---- q/k/v assembly ----

struct QkvCase {
  int64_t tokens, heads, nope, rope, v_dim, qk_width, v_width;
  bool interleaved;
  double scale;
};

TEST_F(MlaGpu, QkvAssemblyAndItsTransposeMatchCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const QkvCase& c :
       {QkvCase{37, 4, 8, 4, 6, 16, 8, true, 1.3}, QkvCase{29, 2, 4, 4, 10, 16, 16, false, 1.0},
        QkvCase{65, 16, 128, 64, 128, 192, 128, true, 1.1}, QkvCase{33, 16, 128, 64, 128, 192, 128, false, 1.0},
        // head widths off multiples of 8, and many heads (a vectorised kernel must fall back
        // to narrower accesses there, and keep every head's rope-key gradient of a token)
        QkvCase{11, 3, 6, 6, 5, 13, 7, false, 1.0}, QkvCase{5, 200, 16, 64, 16, 80, 16, false, 0.9},
        QkvCase{23, 5, 6, 10, 7, 16, 8, true, 1.0},  // q in place with an odd pair count
        // in place at rope 32 and 16, heads not filling the one-warp kernels' last pass
        QkvCase{19, 6, 16, 32, 16, 48, 16, true, 1.2}, QkvCase{13, 6, 24, 16, 8, 40, 8, false, 1.0},
        QkvCase{17, 6, 24, 16, 8, 40, 8, true, 1.0}}) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.heads << ", nope " << c.nope << ", rope " << c.rope << ", v "
                                      << c.v_dim << (c.interleaved ? ", interleaved" : ""));
    const int64_t T = c.tokens, H = c.heads, dqk = c.nope + c.rope, kv_width = c.nope + c.v_dim;
    ops::RopeSpec rope_spec;
    rope_spec.theta = 10000.0;
    const ops::MlaRope rope{ops::rope_inverse_frequencies(rope_spec, c.rope), c.interleaved, float(c.scale)};
    std::vector<int64_t> positions(static_cast<size_t>(T));
    std::vector<int32_t> positions32(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions32[size_t(t)] = int32_t(positions[size_t(t)] = (t * 7) % 23);
    const Tensor inv_freq = Tensor::from_vector(rope.inverse_frequencies, {c.rope / 2}).to(kGpu);
    const Tensor pos = Tensor::from_vector(positions32, {T}).to(kGpu);
    const ops::cuda::MlaQkvLayout layout{c.nope, c.rope, c.v_dim, c.interleaved, c.scale};

    const Tensor q_proj = random_normal({T, H, dqk}, DType::BF16, kGpu, rng());
    const Tensor kv = random_normal({T, H, kv_width}, DType::BF16, kGpu, rng());
    const Tensor k_rope = random_normal({T, c.rope}, DType::BF16, kGpu, rng());
    const Tensor q = poisoned({T, H, c.qk_width}, DType::BF16, kGpu), k = poisoned({T, H, c.qk_width}, DType::BF16, kGpu);
    const Tensor v = poisoned({T, H, c.v_width}, DType::BF16, kGpu);
    ops::cuda::mla_qkv_forward(q_proj, kv, k_rope, inv_freq, pos, layout, q, k, v);

    const Tensor qf = to_cpu_f32(q_proj), kvf = to_cpu_f32(kv), krf = to_cpu_f32(k_rope).view({T, 1, c.rope});
    const Tensor eq = Tensor::zeros({T, H, c.qk_width}, DType::F32), ek = Tensor::zeros({T, H, c.qk_width}, DType::F32);
    const Tensor ev = Tensor::zeros({T, H, c.v_width}, DType::F32);
    place(eq, 0, take(qf, 0, c.nope));
    place(eq, c.nope, ops::mla_rope_forward(take(qf, c.nope, c.rope), rope, positions));
    place(ek, 0, take(kvf, 0, c.nope));
    place(ek, c.nope, ops::mla_rope_forward(krf, rope, positions));
    place(ev, 0, take(kvf, c.nope, c.v_dim));
    EXPECT_LT(relative_error(q, eq), kBf16Tolerance);
    EXPECT_LT(relative_error(k, ek), kBf16Tolerance);
    EXPECT_LT(relative_error(v, ev), kBf16Tolerance);
    const bool in_place = c.qk_width == dqk;  // the block's path at such widths: q is q_proj rotated in place
    if (in_place) {
      const Tensor q_rotated = q_proj.clone();
      ops::cuda::mla_q_rope_in_place(q_rotated, inv_freq, pos, layout, /*backward=*/false);
      const Tensor k_only = poisoned(k.shape(), DType::BF16, kGpu), v_only = poisoned(v.shape(), DType::BF16, kGpu);
      ops::cuda::mla_qkv_forward({}, kv, k_rope, inv_freq, pos, layout, {}, k_only, v_only);
      // The copying kernel's arithmetic: equal but for an odd last-bit rounding where contraction differs.
      EXPECT_LT(relative_error(q_rotated, to_cpu_f32(q)), 1e-3);
      EXPECT_LT(relative_error(k_only, to_cpu_f32(k)), 1e-3);
      EXPECT_EQ(relative_error(v_only, to_cpu_f32(v)), 0.0);
      // The one-launch kernel (the block's path) against the two separate ones: the same arithmetic, so the same
      // bits are expected; a last-bit contraction difference would show as a small nonzero error, printed.
      const Tensor q_one = q_proj.clone();
      const Tensor k_one = poisoned(k.shape(), DType::BF16, kGpu), v_one = poisoned(v.shape(), DType::BF16, kGpu);
      ops::cuda::mla_qkv_forward_in_place(q_one, kv, k_rope, inv_freq, pos, layout, k_one, v_one);
      const double q_error = relative_error(q_one, to_cpu_f32(q_rotated)), k_error = relative_error(k_one, to_cpu_f32(k_only));
      if (q_error != 0.0 || k_error != 0.0) std::printf("in-place forward against the separate kernels: q %.3g, k %.3g\n", q_error, k_error);
      EXPECT_LT(q_error, 1e-3);
      EXPECT_LT(k_error, 1e-3);
      EXPECT_EQ(relative_error(v_one, to_cpu_f32(v_only)), 0.0);
    }

    const Tensor dq = random_normal(q.shape(), DType::BF16, kGpu, rng()), dk = random_normal(k.shape(), DType::BF16, kGpu, rng());
    const Tensor dv = random_normal(v.shape(), DType::BF16, kGpu, rng());
    const Tensor dq_proj = poisoned(q_proj.shape(), DType::BF16, kGpu), dkv = poisoned(kv.shape(), DType::BF16, kGpu);
    const Tensor dk_rope = poisoned(k_rope.shape(), DType::BF16, kGpu);
    ops::cuda::mla_qkv_backward(dq, dk, dv, inv_freq, pos, layout, dq_proj, dkv, dk_rope);

    const Tensor dqf = to_cpu_f32(dq), dkf = to_cpu_f32(dk), dvf = to_cpu_f32(dv);
    const Tensor edq = Tensor::zeros({T, H, dqk}, DType::F32), edkv = Tensor::zeros({T, H, kv_width}, DType::F32);
    place(edq, 0, take(dqf, 0, c.nope));
    place(edq, c.nope, ops::mla_rope_backward(take(dqf, c.nope, c.rope), rope, positions));
    place(edkv, 0, take(dkf, 0, c.nope));
    place(edkv, c.nope, take(dvf, 0, c.v_dim));
    Tensor summed = Tensor::zeros({T, 1, c.rope}, DType::F32);
    const Tensor dk_rope_heads = take(dkf, c.nope, c.rope);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < c.rope; ++i)
          summed.data<float>()[t * c.rope + i] += dk_rope_heads.data<float>()[(t * H + h) * c.rope + i];
    EXPECT_LT(relative_error(dq_proj, edq), kBf16Tolerance);
    EXPECT_LT(relative_error(dkv, edkv), kBf16Tolerance);
    EXPECT_LT(relative_error(dk_rope, ops::mla_rope_backward(summed, rope, positions).view({T, c.rope})), kBf16Tolerance);
    if (in_place) {
      const Tensor dq_in_place = dq.clone();
      ops::cuda::mla_q_rope_in_place(dq_in_place, inv_freq, pos, layout, /*backward=*/true);
      const Tensor dkv_only = poisoned(kv.shape(), DType::BF16, kGpu), dk_rope_only = poisoned(k_rope.shape(), DType::BF16, kGpu);
      ops::cuda::mla_qkv_backward({}, dk, dv, inv_freq, pos, layout, {}, dkv_only, dk_rope_only);
      EXPECT_LT(relative_error(dq_in_place, to_cpu_f32(dq_proj)), 1e-3);
      EXPECT_EQ(relative_error(dkv_only, to_cpu_f32(dkv)), 0.0);
      EXPECT_LT(relative_error(dk_rope_only, to_cpu_f32(dk_rope)), 1e-3);
      const Tensor dq_one = dq.clone();
      const Tensor dkv_one = poisoned(kv.shape(), DType::BF16, kGpu), dk_rope_one = poisoned(k_rope.shape(), DType::BF16, kGpu);
      ops::cuda::mla_qkv_backward_in_place(dq_one, dk, dv, inv_freq, pos, layout, dkv_one, dk_rope_one);
      const double dq_error = relative_error(dq_one, to_cpu_f32(dq_in_place));
      const double dk_rope_error = relative_error(dk_rope_one, to_cpu_f32(dk_rope_only));
      if (dq_error != 0.0 || dk_rope_error != 0.0)
        std::printf("in-place backward against the separate kernels: dq %.3g, dk_rope %.3g\n", dq_error, dk_rope_error);
      EXPECT_LT(dq_error, 1e-3);
      EXPECT_LT(dk_rope_error, 1e-3);
      EXPECT_EQ(relative_error(dkv_one, to_cpu_f32(dkv_only)), 0.0);

      // Where attention reads v in kv (the block's path at Moonlight's widths): v is not built and dkv's v columns
      // are left to attention, the rest as above, bit for bit.
      if (ops::cuda::mla_v_read_in_place(layout, H, c.qk_width, /*k_rope_stride=*/c.rope)) {
        const Tensor q_ref = q_proj.clone(), k_ref = poisoned(k.shape(), DType::BF16, kGpu);
        ops::cuda::mla_qkv_forward_in_place(q_ref, kv, k_rope, inv_freq, pos, layout, k_ref,
                                            poisoned(v.shape(), DType::BF16, kGpu));
        const Tensor q_kv = q_proj.clone(), k_kv = poisoned(k.shape(), DType::BF16, kGpu);
        ops::cuda::mla_qkv_forward_in_place(q_kv, kv, k_rope, inv_freq, pos, layout, k_kv, {});
        EXPECT_EQ(relative_error(q_kv, to_cpu_f32(q_ref)), 0.0);
        EXPECT_EQ(relative_error(k_kv, to_cpu_f32(k_ref)), 0.0);
        const Tensor dq_kv = dq.clone(), dk_rope_kv = poisoned(k_rope.shape(), DType::BF16, kGpu);
        const Tensor dkv_kv = random_normal(kv.shape(), DType::BF16, kGpu, rng());  // its v columns must stay
        const Tensor expected_dkv = to_cpu_f32(dkv_kv);
        place(expected_dkv, 0, take(to_cpu_f32(dkv_one), 0, c.nope));
        ops::cuda::mla_qkv_backward_in_place(dq_kv, dk, {}, inv_freq, pos, layout, dkv_kv, dk_rope_kv);
        EXPECT_EQ(relative_error(dq_kv, to_cpu_f32(dq_one)), 0.0);
        EXPECT_EQ(relative_error(dk_rope_kv, to_cpu_f32(dk_rope_one)), 0.0);
        EXPECT_EQ(relative_error(dkv_kv, expected_dkv), 0.0);
      }
    }
  }
}

// v read (and dv written) as columns of a wider per-head array, as the MLA block does at Moonlight's widths (kv_b's
// output [T, heads, nope + v]): against packed v, in the rows layout and the ragged one; the other columns of the
// gradient array are left as they were.
TEST_F(MlaGpu, ValuesReadInPlaceMatchPackedValues) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  const int64_t heads = 4, d = 192, nope = 128, dv = 128, width = nope + dv;
  for (const auto& [lengths, bound] : {std::pair<std::vector<int64_t>, int64_t>{{256, 256}, 256},
                                       std::pair<std::vector<int64_t>, int64_t>{{100, 28, 128, 1, 127}, 128}}) {
    SCOPED_TRACE(::testing::Message() << lengths.size() << " documents, bound " << bound);
    const std::vector<int64_t> starts = document_starts(lengths);
    const int64_t tokens = int64_t(starts.size());
    const double scale = 0.3 / std::sqrt(double(d));
    const Tensor q = random_normal({tokens, heads, d}, DType::BF16, kGpu, rng());
    const Tensor k = random_normal({tokens, heads, d}, DType::BF16, kGpu, rng());
    const Tensor kv = random_normal({tokens, heads, width}, DType::BF16, kGpu, rng());
    const Tensor dout = random_normal({tokens, heads, dv}, DType::BF16, kGpu, rng());
    const Tensor kv_host = to_cpu_f32(kv), v_packed = Tensor::zeros({tokens, heads, dv}, DType::F32);
    place(v_packed, 0, take(kv_host, nope, dv));
    const Tensor v = ops::cast(v_packed, DType::BF16).to(kGpu);  // exactly kv's v columns (bf16 values)
    const ops::cuda::PackedDocuments docs = ops::cuda::pack_documents(starts, bound);

    const Tensor out = poisoned({tokens, heads, dv}, DType::BF16, kGpu);
    const Tensor stats = ops::cuda::causal_attention_forward(q, k, v, docs, scale, out);
    const Tensor dq = poisoned(q.shape(), DType::BF16, kGpu), dk = poisoned(k.shape(), DType::BF16, kGpu);
    const Tensor dvv = poisoned(v.shape(), DType::BF16, kGpu);
    ops::cuda::causal_attention_backward(dout, q, k, v, out, stats, docs, scale, dq, dk, dvv);

    const ops::cuda::HeadColumns v_in_kv(kv, nope, dv);
    const Tensor out_kv = poisoned(out.shape(), DType::BF16, kGpu);
    const Tensor stats_kv = ops::cuda::causal_attention_forward(q, k, v_in_kv, docs, scale, out_kv);
    const Tensor dkv = random_normal(kv.shape(), DType::BF16, kGpu, rng());
    const Tensor dkv_before = to_cpu_f32(dkv);
    const Tensor dq_kv = poisoned(q.shape(), DType::BF16, kGpu), dk_kv = poisoned(k.shape(), DType::BF16, kGpu);
    ops::cuda::causal_attention_backward(dout, q, k, v_in_kv, out_kv, stats_kv, docs, scale, dq_kv, dk_kv,
                                         ops::cuda::HeadColumns(dkv, nope, dv));
    // The same graph but for v's strides: cuDNN may pick another kernel for them, so within bf16's rounding.
    EXPECT_LT(relative_error(out_kv, to_cpu_f32(out)), kBf16Tolerance);
    EXPECT_LT(relative_error(stats_kv, to_cpu_f32(stats)), 1e-5);
    EXPECT_LT(relative_error(dq_kv, to_cpu_f32(dq)), kBf16Tolerance);
    EXPECT_LT(relative_error(dk_kv, to_cpu_f32(dk)), kBf16Tolerance);
    const Tensor dkv_after = to_cpu_f32(dkv);
    EXPECT_LT(relative_error(take(dkv_after, nope, dv), to_cpu_f32(dvv)), kBf16Tolerance);
    EXPECT_EQ(relative_error(take(dkv_after, 0, nope), take(dkv_before, 0, nope)), 0.0);  // k_nope's columns kept
    std::printf("v in kv against packed v (%zu documents): out %.3g, dq %.3g, dk %.3g, dv %.3g\n", lengths.size(),
                relative_error(out_kv, to_cpu_f32(out)), relative_error(dq_kv, to_cpu_f32(dq)),
                relative_error(dk_kv, to_cpu_f32(dk)), relative_error(take(dkv_after, nope, dv), to_cpu_f32(dvv)));
  }
}

// Not a check: the q/k/v assembly and its transpose at Moonlight's shapes (8192 tokens, 16 heads, nope 128, rope
// 64, v 128), against the bytes they must move. Run with --gtest_also_run_disabled_tests.
TEST_F(MlaGpu, DISABLED_TimesQkvAssembly) {
  const int64_t T = 8192, H = 16, nope = 128, rope = 64, dv = 128, qk = nope + rope;
  ops::RopeSpec rope_spec;
  rope_spec.theta = 50000.0;
  const Tensor inv_freq = Tensor::from_vector(ops::rope_inverse_frequencies(rope_spec, rope), {rope / 2}).to(kGpu);
  std::vector<int32_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t(t % 4096);
  const Tensor pos = Tensor::from_vector(positions, {T}).to(kGpu);
  const ops::cuda::MlaQkvLayout layout{nope, rope, dv, true, 1.0};
  const Tensor q_proj = random_normal({T, H, qk}, DType::BF16, kGpu, rng());
  const Tensor kv = random_normal({T, H, nope + dv}, DType::BF16, kGpu, rng());
  const Tensor k_rope = random_normal({T, rope}, DType::BF16, kGpu, rng());
  const Tensor q = Tensor::empty({T, H, qk}, DType::BF16, kGpu), k = Tensor::empty({T, H, qk}, DType::BF16, kGpu);
  const Tensor v = Tensor::empty({T, H, dv}, DType::BF16, kGpu);
  const Tensor dq_proj = Tensor::empty(q_proj.shape(), DType::BF16, kGpu), dkv = Tensor::empty(kv.shape(), DType::BF16, kGpu);
  const Tensor dk_rope = Tensor::empty(k_rope.shape(), DType::BF16, kGpu);
  double forward_ms = 0, backward_ms = 0;
  constexpr int kRuns = 20;
  for (int i = 0; i < kRuns + 2; ++i) {
    gpu::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    ops::cuda::mla_qkv_forward(q_proj, kv, k_rope, inv_freq, pos, layout, q, k, v);
    gpu::synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    ops::cuda::mla_qkv_backward(q, k, v, inv_freq, pos, layout, dq_proj, dkv, dk_rope);
    gpu::synchronize();
    const auto t2 = std::chrono::steady_clock::now();
    if (i < 2) continue;
    forward_ms += std::chrono::duration<double, std::milli>(t1 - t0).count() / kRuns;
    backward_ms += std::chrono::duration<double, std::milli>(t2 - t1).count() / kRuns;
  }
  // Each direction reads one side and writes the other: q_proj + kv + k_rope and q + k + v.
  const double bytes = 2.0 * T * (H * (qk + nope + dv) + rope + H * (2 * qk + dv));
  std::printf("mla qkv assembly (8192 tokens, 16 heads): forward %.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s)\n",
              forward_ms, bytes / forward_ms / 1e6, backward_ms, bytes / backward_ms / 1e6);
  // What the block runs at these widths: q_proj's rope columns rotated in place (read and written), then k and v
  // from kv and k_rope; backward the same in reverse.
  const auto time_ms = [](const std::function<void()>& run) { return testing::mean_gpu_ms(run); };
  const double q_ms = time_ms([&] { ops::cuda::mla_q_rope_in_place(q_proj, inv_freq, pos, layout, false); });
  const double kv_ms = time_ms([&] { ops::cuda::mla_qkv_forward({}, kv, k_rope, inv_freq, pos, layout, {}, k, v); });
  const double dq_ms = time_ms([&] { ops::cuda::mla_q_rope_in_place(q_proj, inv_freq, pos, layout, true); });
  const double dkv_ms = time_ms([&] { ops::cuda::mla_qkv_backward({}, k, v, inv_freq, pos, layout, {}, dkv, dk_rope); });
  const double one_forward_ms = time_ms([&] { ops::cuda::mla_qkv_forward_in_place(q_proj, kv, k_rope, inv_freq, pos, layout, k, v); });
  const double one_backward_ms = time_ms([&] { ops::cuda::mla_qkv_backward_in_place(q_proj, k, v, inv_freq, pos, layout, dkv, dk_rope); });
  const double q_bytes = 2.0 * 2 * T * H * rope, kv_bytes = 2.0 * T * (H * (nope + dv) + rope + H * (qk + dv));
  std::printf("mla qkv in one launch (the block's path): forward %.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s)\n",
              one_forward_ms, (q_bytes + kv_bytes) / one_forward_ms / 1e6, one_backward_ms,
              (q_bytes + kv_bytes) / one_backward_ms / 1e6);
  std::printf("mla qkv with q in place: forward q %.3f ms (%.0f GB/s) + k, v %.3f ms (%.0f GB/s); backward dq %.3f ms "
              "(%.0f GB/s) + dkv %.3f ms (%.0f GB/s)\n",
              q_ms, q_bytes / q_ms / 1e6, kv_ms, kv_bytes / kv_ms / 1e6, dq_ms, q_bytes / dq_ms / 1e6, dkv_ms,
              kv_bytes / dkv_ms / 1e6);
}

TEST_F(MlaGpu, CopyLeadingColumnsPadsAndNarrows) {
  // Widths off multiples of 8 and on them (where a vectorised copy would move 16 bytes at a time).
  for (const auto& [width, wide_width, narrow_width] : {std::tuple{6, 8, 4}, std::tuple{16, 24, 8}}) {
    const Tensor src = random_normal({5, 3, width}, DType::BF16, kGpu, rng());
    const Tensor wide = poisoned({5, 3, wide_width}, DType::BF16, kGpu), narrow = poisoned({5, 3, narrow_width}, DType::BF16, kGpu);
    ops::cuda::copy_leading_columns(src, wide);
    ops::cuda::copy_leading_columns(src, narrow);
    const Tensor s = to_cpu_f32(src);
    const Tensor expected_wide = Tensor::zeros({5, 3, wide_width}, DType::F32);
    place(expected_wide, 0, s);
    EXPECT_EQ(relative_error(wide, expected_wide), 0.0);
    EXPECT_EQ(relative_error(narrow, take(s, 0, narrow_width)), 0.0);
  }
}

// ---- the sigmoid group-limited router ----

struct RouterCase {
  int64_t tokens, experts;
  ops::GroupLimitedRouter router;
  bool bias;
};

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Whether any two of `values` are within `gap` of each other.
bool near_tie(std::vector<float> values, float gap) {
  std::sort(values.begin(), values.end());
  for (size_t i = 1; i < values.size(); ++i)
    if (values[i] - values[i - 1] < gap) return true;
  return false;
}

// Logits [T, E] and a bias [E] whose biased scores and group scores have no near-ties in any row. The gap narrows
// past 256 experts, where rows with no two of 384 scores within 1e-4 of each other are too rare to draw.
std::pair<Tensor, Tensor> router_inputs(const RouterCase& c, std::mt19937& rng) {
  const int64_t E = c.experts, group = E / c.router.num_groups;
  const float gap = E > 256 ? 1e-5f : 1e-4f;
  std::uniform_real_distribution<float> logit(-3.0f, 3.0f), bias_value(-0.3f, 0.3f);
  Tensor bias = Tensor::zeros({E}, DType::F32);
  if (c.bias)
    for (int64_t e = 0; e < E; ++e) bias.data<float>()[e] = bias_value(rng);
  Tensor logits = Tensor::empty({c.tokens, E}, DType::F32);
  std::vector<float> choice(static_cast<size_t>(E)), groups(static_cast<size_t>(c.router.num_groups));
  for (int64_t t = 0; t < c.tokens; ++t) {
    float* row = logits.data<float>() + t * E;
    do {
      for (int64_t e = 0; e < E; ++e) {
        row[e] = logit(rng);
        choice[size_t(e)] = sigmoid(row[e]) + bias.data<float>()[e];
      }
      for (int64_t g = 0; g < c.router.num_groups; ++g) {
        std::vector<float> members(choice.begin() + g * group, choice.begin() + (g + 1) * group);
        std::partial_sort(members.begin(), members.begin() + 2, members.end(), std::greater<float>());
        groups[size_t(g)] = members[0] + members[1];
      }
    } while (near_tie(choice, gap) || near_tie(groups, gap));
  }
  return {logits, bias};
}

const std::vector<RouterCase> kRouterCases = {
    {37, 8, {3, 4, 2, true, 2.5}, true},      // the tiny fixture's router
    {41, 6, {2, 1, 1, false, 1.5}, false},    // one group, no renormalisation
    {100, 64, {6, 1, 1, true, 2.446}, true},  // Moonlight
    {70, 256, {8, 8, 4, true, 2.5}, true},    // DeepSeek-V3
    {45, 384, {8, 1, 1, true, 2.827}, true},  // Kimi-K2
    {19, 512, {16, 8, 4, true, 2.5}, true},   // the kernels' limit, in groups
    {33, 20, {4, 5, 3, false, 1.0}, true},    // groups of 4, kept groups past one warp slot
    {0, 8, {2, 2, 1, true, 1.0}, true},
};

TEST_F(MlaGpu, SigmoidRouterMatchesCpu) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  for (const RouterCase& c : kRouterCases) {
    SCOPED_TRACE(::testing::Message() << "T " << c.tokens << ", E " << c.experts << ", groups " << c.router.num_groups
                                      << ", top groups " << c.router.topk_groups << ", k " << c.router.top_k);
    const auto [logits, bias] = router_inputs(c, rng());
    const ops::Routing expected = ops::sigmoid_router_forward(logits, c.bias ? bias : Tensor(), c.router);
    const int64_t k = c.router.top_k;
    const Tensor ids = poisoned({c.tokens, k}, DType::I32, kGpu), weights = poisoned({c.tokens, k}, DType::F32, kGpu);
    const Tensor device_logits = logits.to(kGpu);
    ops::cuda::sigmoid_router_forward(device_logits, c.bias ? bias.to(kGpu) : Tensor(), c.router, ids, weights);
    const Tensor host_ids = ids.to(Device::cpu());
    EXPECT_EQ(std::vector<int32_t>(host_ids.data<int32_t>(), host_ids.data<int32_t>() + host_ids.numel()), expected.expert);
    if (c.tokens > 0) {
      EXPECT_LE(relative_error(weights, Tensor::from_vector(expected.weight, {c.tokens, k})), 1e-5);
    }

    const Tensor dweights = random_normal({c.tokens, k}, DType::F32, Device::cpu(), rng());
    const std::vector<float> dweight(dweights.data<float>(), dweights.data<float>() + dweights.numel());
    const Tensor expected_dlogits = ops::sigmoid_router_backward(expected, dweight, c.router);
    const Tensor dlogits = poisoned({c.tokens, c.experts}, DType::F32, kGpu);
    ops::cuda::sigmoid_router_backward(device_logits, ids, dweights.to(kGpu), c.router, dlogits);
    if (c.tokens > 0) {
      EXPECT_LE(relative_error(dlogits, expected_dlogits), 1e-4);
    }
  }
}

TEST_F(MlaGpu, SigmoidRouterRejectsWhatItCannotDo) {
  const Tensor logits = Tensor::zeros({4, 8}, DType::F32, kGpu);
  const Tensor ids = Tensor::empty({4, 2}, DType::I32, kGpu), weights = Tensor::empty({4, 2}, DType::F32, kGpu);
  EXPECT_THROW(ops::cuda::sigmoid_router_forward(logits, {}, {2, 3, 1, true, 1.0}, ids, weights), Error);  // 8 % 3
  EXPECT_THROW(ops::cuda::sigmoid_router_forward(logits, {}, {2, 8, 1, true, 1.0}, ids, weights), Error);  // groups of 1
  EXPECT_THROW(ops::cuda::sigmoid_router_forward(logits, {}, {3, 4, 1, true, 1.0}, ids, weights), Error);  // k > kept
  EXPECT_THROW(ops::cuda::sigmoid_router_forward(logits, Tensor::zeros({7}, DType::F32, kGpu), {2, 4, 2, true, 1.0},
                                                 ids, weights),
               Error);  // bias [7] for 8 experts
}

}  // namespace
}  // namespace moetune
