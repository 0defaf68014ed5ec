// Not checks: the LM head + loss (ops/cuda/linear_cross_entropy.h) timed in its parts at the benchmark jobs'
// shapes (8192 tokens, hidden 2048; Qwen3's vocabulary 151936 and Moonlight's 163840), to choose the chunk height
// and the GEMMs' algorithms from measurements. Run with --gtest_also_run_disabled_tests; every line starts with
// "lmhead".
//
// Per chunk of c rows the op runs: logits = hidden_c · Wᵀ (M c, N V, K 2048), the cross-entropy kernel over the
// logits in place, d(hidden)_c = d(logits) · W (M c, N 2048, K V) and d(W) += d(logits)ᵀ · hidden_c (M V, N 2048,
// K c, beta 1 into the bf16 gradient). Each GEMM is 2·c·V·2048 FLOP.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "gpu_gemm_problem.h"
#include "gpu_test_util.h"
#include "gpu_tiled_random.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/cross_entropy_kernels.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/gemm_candidates.h"
#include "moetune/ops/cuda/linear_cross_entropy.h"

namespace moetune {
namespace {

using testing::random_normal;
using testing::tiled_random;

constexpr int64_t kRows = 8192, kWidth = 2048;

// Mean milliseconds of `run` over `repeats` calls after one warm-up, by CUDA events on the engine's stream.
double time_ms(const std::function<void()>& run, int repeats = 5) {
  run();
  cudaEvent_t start, stop;
  gpu::check(cudaEventCreate(&start), "event");
  gpu::check(cudaEventCreate(&stop), "event");
  gpu::check(cudaEventRecord(start, gpu::stream()), "event record");
  for (int i = 0; i < repeats; ++i) run();
  gpu::check(cudaEventRecord(stop, gpu::stream()), "event record");
  gpu::check(cudaEventSynchronize(stop), "event synchronize");
  float ms = 0;
  gpu::check(cudaEventElapsedTime(&ms, start, stop), "event elapsed");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) / repeats;
}

struct Head {
  int64_t vocab;
  Tensor hidden, weight, targets, dhidden, dweight, loss;
};

Head make_head(int64_t vocab, std::mt19937& rng) {
  Head h{.vocab = vocab};
  h.hidden = tiled_random(kRows, kWidth, rng, 1.0f);
  h.weight = tiled_random(vocab, kWidth, rng, 1.0f / 45.25f);  // logits of order one
  std::vector<int32_t> ids(static_cast<size_t>(kRows));
  std::uniform_int_distribution<int32_t> token(0, int32_t(vocab - 1));
  for (auto& id : ids) id = token(rng);
  h.targets = Tensor::from_vector<int32_t>(ids, {kRows}).to(Device::cuda());
  h.dhidden = Tensor::empty({kRows, kWidth}, DType::BF16, Device::cuda());
  h.dweight = Tensor::zeros({vocab, kWidth}, DType::BF16, Device::cuda());
  h.loss = Tensor::zeros({1}, DType::F32, Device::cuda());
  return h;
}

double tflops(double flop, double ms) { return flop / ms / 1e9; }

class LmHeadTiming : public testing::GpuTest {};

// The whole op per chunk height, then each part of one full chunk: where the step's LM head time goes.
TEST_F(LmHeadTiming, DISABLED_PartsPerChunkHeight) {
  std::mt19937 rng(7);
  for (const int64_t vocab : {151936, 163840}) {
    Head h = make_head(vocab, rng);
    const double step_flop = 6.0 * double(kRows) * double(kWidth) * double(vocab);
    const Tensor logits = Tensor::empty({2048, vocab}, DType::BF16, Device::cuda());
    const auto* targets = static_cast<const int32_t*>(h.targets.raw_data());
    const Tensor row_losses = Tensor::empty({kRows}, DType::F32, Device::cuda());
    for (const int64_t asked : {0, 512, 768, 832, 1024, 1280, 1536, 2048}) {  // 0: the op's default
      const int64_t chunk = ops::cuda::linear_cross_entropy_chunk_rows(kRows, vocab, asked);
      const double whole = time_ms([&] {
        ops::cuda::linear_cross_entropy(h.hidden, h.weight, h.targets, 1e-4, h.loss, h.dhidden, h.dweight, asked);
      }, 3);
      const Tensor x = h.hidden.narrow(0, chunk), l = logits.narrow(0, chunk), dx = h.dhidden.narrow(0, chunk);
      const double gemm_flop = 2.0 * double(chunk) * double(vocab) * double(kWidth);
      const double t_logits = time_ms([&] { ops::cuda::matmul_tuned(x, false, h.weight, true, l); });
      const double t_ce = time_ms([&] {
        gpu::check(ops::cuda::launch_cross_entropy_rows(l.raw_data(), targets, chunk, vocab, 1e-4f, true,
                                                        static_cast<float*>(row_losses.raw_data()), gpu::stream()),
                   "cross-entropy");
      });
      const double t_dx = time_ms([&] { ops::cuda::matmul_tuned(l, false, h.weight, false, dx); });
      // d(weight) as the op runs it (the fastest candidate, timed at its first call: beta 0 here) and as
      // cuBLASLt's heuristic would.
      ops::cuda::matmul_tuned(l, true, x, false, h.dweight, 1.0f, 0.0f);
      const double t_dw = time_ms([&] { ops::cuda::matmul_tuned(l, true, x, false, h.dweight, 1.0f, 1.0f); });
      const double t_dw_first = time_ms([&] { ops::cuda::matmul(l, true, x, false, h.dweight, 1.0f, 1.0f); });
      const double chunks = double(kRows) / double(chunk);
      std::printf("lmhead vocab %lld chunk %lld%s (%lld chunks, logits %.0f MB): whole %.2f ms (%.0f TFLOP/s) | "
                  "per chunk: logits %.3f ms (%.0f), ce %.3f ms (%.2f TB/s), dhidden %.3f ms (%.0f), dweight %.3f ms "
                  "(%.0f; heuristic's first %.3f ms, %.0f) | x chunks: %.2f ms\n",
                  (long long)vocab, (long long)chunk, asked == 0 ? " (default)" : "",
                  (long long)((kRows + chunk - 1) / chunk), double(chunk * vocab * 2) / 1e6, whole, tflops(step_flop, whole), t_logits,
                  tflops(gemm_flop, t_logits), t_ce, 2.0 * double(chunk * vocab * 2) / t_ce / 1e9, t_dx,
                  tflops(gemm_flop, t_dx), t_dw, tflops(gemm_flop, t_dw), t_dw_first, tflops(gemm_flop, t_dw_first),
                  chunks * (t_logits + t_ce + t_dx + t_dw));
    }
  }
}

// A bf16 d(weight) is rounded once per chunk (beta 1 into bf16): its distance from the same gradient accumulated
// in fp32, per chunk height (more rows a chunk, fewer roundings), at Qwen3's vocabulary.
TEST_F(LmHeadTiming, DISABLED_WeightGradientRoundingPerChunkHeight) {
  std::mt19937 rng(7);
  const Head h = make_head(151936, rng);
  for (const int64_t chunk : {768, 832, 2048}) {
    const Tensor exact = Tensor::zeros({h.vocab, kWidth}, DType::F32, Device::cuda());
    const Tensor rounded = Tensor::zeros({h.vocab, kWidth}, DType::BF16, Device::cuda());
    ops::cuda::linear_cross_entropy(h.hidden, h.weight, h.targets, 1.0 / kRows, h.loss, h.dhidden, exact, chunk);
    ops::cuda::linear_cross_entropy(h.hidden, h.weight, h.targets, 1.0 / kRows, h.loss, h.dhidden, rounded, chunk);
    std::printf("lmhead d(weight) in bf16 at chunk %lld (%lld roundings): relative error %.3e against fp32\n",
                (long long)chunk, (long long)((kRows + chunk - 1) / chunk),
                testing::relative_error(rounded, testing::to_cpu_f32(exact)));
  }
}

// The whole op with its GEMMs tuned (ops/cuda/gemm_candidates.h: matmul_tuned) against the heuristic's first
// algorithms, alternating, at the default chunk; and whether the ranked candidates of each GEMM give the first's
// bits (they may differ in how they split K): whether the tuned choice can change a run's numbers.
TEST_F(LmHeadTiming, DISABLED_TunedAgainstFirstAlgorithms) {
  std::mt19937 rng(7);
  for (const int64_t vocab : {151936, 163840}) {
    Head h = make_head(vocab, rng);
    const double step_flop = 6.0 * double(kRows) * double(kWidth) * double(vocab);
    for (int round = 0; round < 2; ++round)
      for (const bool tuned : {false, true}) {
        ops::cuda::set_gemm_tuning(tuned);
        const double ms = time_ms([&] {
          ops::cuda::linear_cross_entropy(h.hidden, h.weight, h.targets, 1e-4, h.loss, h.dhidden, h.dweight, 0, true);
        }, 5);
        std::printf("lmhead vocab %lld whole op, %s: %.3f ms (%.0f TFLOP/s)\n", (long long)vocab,
                    tuned ? "tuned" : "heuristic's first", ms, tflops(step_flop, ms));
      }
    ops::cuda::set_gemm_tuning(true);
    const int64_t chunk = ops::cuda::linear_cross_entropy_chunk_rows(kRows, vocab, 0);
    const Tensor logits = tiled_random(chunk, vocab, rng, 1e-4f);
    const Tensor x = h.hidden.narrow(0, chunk), dx = h.dhidden.narrow(0, chunk);
    using testing::GemmProblem;
    for (const GemmProblem& g : {GemmProblem{"logits", x, false, h.weight, true, Tensor::empty({chunk, vocab}, DType::BF16, Device::cuda()), 0.0f},
                                 GemmProblem{"dhidden", logits, false, h.weight, false, dx, 0.0f},
                                 GemmProblem{"dweight", logits, true, x, false, h.dweight, 0.0f}}) {
      const size_t count = ops::cuda::matmul_candidates(g.a, g.transpose_a, g.b, g.transpose_b, g.d, 8).size();
      ops::cuda::matmul_candidate(0, g.a, g.transpose_a, g.b, g.transpose_b, g.d);
      const Tensor first = g.d.to(Device::cpu());
      const auto* first_bits = static_cast<const uint16_t*>(first.raw_data());
      for (size_t i = 1; i < count; ++i) {
        ops::cuda::matmul_candidate(int(i), g.a, g.transpose_a, g.b, g.transpose_b, g.d);
        const Tensor bits = g.d.to(Device::cpu());
        const auto* candidate_bits = static_cast<const uint16_t*>(bits.raw_data());
        int64_t differ = 0;
        for (int64_t e = 0; e < bits.numel(); ++e) differ += candidate_bits[e] != first_bits[e];
        std::printf("lmhead vocab %lld chunk %lld %s candidate %zu: %lld of %lld elements differ from candidate 0's\n",
                    (long long)vocab, (long long)chunk, g.name, i, (long long)differ, (long long)bits.numel());
      }
    }
  }
}

// cuBLASLt's ranked algorithms for the three GEMMs at a few chunk heights, each timed (candidate 0 is what
// matmul runs).
TEST_F(LmHeadTiming, DISABLED_GemmCandidates) {
  std::mt19937 rng(7);
  for (const int64_t vocab : {151936, 163840}) {
    Head h = make_head(vocab, rng);
    const Tensor logits = tiled_random(2048, vocab, rng, 1e-4f);
    for (const int64_t chunk : {768, 832, 1024, 1664, 2048}) {
      const Tensor x = h.hidden.narrow(0, chunk), l = logits.narrow(0, chunk), dx = h.dhidden.narrow(0, chunk);
      const double gemm_flop = 2.0 * double(chunk) * double(vocab) * double(kWidth);
      using testing::GemmProblem;
      for (const GemmProblem& g : {GemmProblem{"logits", x, false, h.weight, true, l, 0.0f},
                                   GemmProblem{"dhidden", l, false, h.weight, false, dx, 0.0f},
                                   GemmProblem{"dweight", l, true, x, false, h.dweight, 1.0f}}) {
        const std::vector<ops::cuda::GemmCandidate> candidates = ops::cuda::matmul_candidates(g.a, g.transpose_a, g.b, g.transpose_b, g.d, 12);
        for (size_t i = 0; i < candidates.size(); ++i) {
          double ms = -1;
          try {
            ms = time_ms([&] { ops::cuda::matmul_candidate(int(i), g.a, g.transpose_a, g.b, g.transpose_b, g.d, 1.0f, g.beta); }, 3);
          } catch (const Error& e) {
            std::printf("lmhead candidate failed: %s\n", e.what());
          }
          std::printf("lmhead vocab %lld chunk %lld %s candidate %zu: %.3f ms (%.0f TFLOP/s) %s\n", (long long)vocab,
                      (long long)chunk, g.name, i, ms, ms > 0 ? tflops(gemm_flop, ms) : 0.0,
                      candidates[i].description.c_str());
        }
      }
      // d(hidden) has c/128 · 2048/128 output tiles at most (104 at 832 rows) for 132 SMs and K = V: split K.
      for (const int split : {1, 2, 3, 4, 6, 8})
        for (const int candidate : {0, 1}) {
          double ms = -1;
          try {
            ms = time_ms([&] { ops::cuda::matmul_candidate(candidate, l, false, h.weight, false, dx, 1.0f, 0.0f, split); }, 3);
          } catch (const Error& e) {
            std::printf("lmhead split failed: %s\n", e.what());
          }
          std::printf("lmhead vocab %lld chunk %lld dhidden candidate %d split-k %d: %.3f ms (%.0f TFLOP/s)\n",
                      (long long)vocab, (long long)chunk, candidate, split, ms, ms > 0 ? tflops(gemm_flop, ms) : 0.0);
        }
    }
  }
}

}  // namespace
}  // namespace moetune
