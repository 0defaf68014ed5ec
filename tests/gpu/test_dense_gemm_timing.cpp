// Not checks: the dense (cuBLASLt) GEMMs of the benchmark steps outside the LM head — attention projections, the
// dense MLP, the shared experts — each with cuBLASLt's first eight ranked algorithms timed side by side, to see
// whether the heuristic's first pick (what ops/cuda/gemm.h's matmul runs) leaves time on the table, as it did for
// the LM head's d(weight) (tests/gpu/test_lm_head_timing.cpp). Run with --gtest_also_run_disabled_tests; every
// line starts with "dense".
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <vector>

#include "gpu_gemm_problem.h"
#include "gpu_test_util.h"
#include "gpu_timing.h"
#include "moetune/ops/cuda/gemm_candidates.h"

namespace moetune {
namespace {

class DenseGemmTiming : public testing::GpuTest {};

struct Projection {
  const char* job;
  const char* name;
  int64_t in, out, per_step;  // per_step: how many such layers run in the job's step
};

TEST_F(DenseGemmTiming, DISABLED_StepShapesCandidates) {
  constexpr int64_t kTokens = 8192;
  const std::vector<Projection> projections = {
      {"moonlight", "mla q_proj", 2048, 3072, 4},   {"moonlight", "mla kv_a", 2048, 512, 4},
      {"moonlight", "mla kv_b", 512, 4096, 4},      {"moonlight", "mla o_proj", 2048, 2048, 4},
      {"moonlight", "dense gate_up", 2048, 22528, 1}, {"moonlight", "dense down", 11264, 2048, 1},
      {"moonlight", "shared gate_up", 2048, 5632, 3}, {"moonlight", "shared down", 2816, 2048, 3},
      {"qwen3", "qkv", 2048, 5120, 4},              {"qwen3", "o_proj", 4096, 2048, 4},
  };
  std::mt19937 rng(11);
  double heuristic_total = 0, best_total = 0;
  const char* job = projections.front().job;
  auto report_job = [&] {
    std::printf("dense %s: heuristic's picks %.3f ms a step, the best candidates %.3f ms (%.3f ms to gain)\n", job,
                heuristic_total, best_total, heuristic_total - best_total);
    heuristic_total = best_total = 0;
  };
  for (const Projection& p : projections) {
    if (std::string(p.job) != job) {
      report_job();
      job = p.job;
    }
    const Tensor x = testing::random_normal({kTokens, p.in}, DType::BF16, Device::cuda(), rng, 1.0f);
    const Tensor w = testing::random_normal({p.out, p.in}, DType::BF16, Device::cuda(), rng, 0.02f);
    const Tensor y = Tensor::empty({kTokens, p.out}, DType::BF16, Device::cuda());
    const Tensor dy = testing::random_normal({kTokens, p.out}, DType::BF16, Device::cuda(), rng, 1.0f);
    const Tensor dx = Tensor::empty({kTokens, p.in}, DType::BF16, Device::cuda());
    const Tensor dw = Tensor::zeros({p.out, p.in}, DType::BF16, Device::cuda());
    const double flop = 2.0 * double(kTokens) * double(p.in) * double(p.out);
    using testing::GemmProblem;
    for (const GemmProblem& g : {GemmProblem{"forward", x, false, w, true, y, 0.0f},
                                 GemmProblem{"d(input)", dy, false, w, false, dx, 0.0f},
                                 GemmProblem{"d(weight)", dy, true, x, false, dw, 1.0f}}) {
      const std::vector<ops::cuda::GemmCandidate> candidates = ops::cuda::matmul_candidates(g.a, g.transpose_a, g.b, g.transpose_b, g.d, 8);
      double first = -1, best = 1e30;
      size_t best_index = 0;
      for (size_t i = 0; i < candidates.size(); ++i) {
        double ms = -1;
        try {
          ms = testing::mean_gpu_ms([&] { ops::cuda::matmul_candidate(int(i), g.a, g.transpose_a, g.b, g.transpose_b, g.d, 1.0f, g.beta); }, 2, 10);
        } catch (const Error& e) {
          std::printf("dense candidate failed: %s\n", e.what());
          continue;
        }
        if (i == 0) first = ms;
        if (ms < best) best = ms, best_index = i;
        std::printf("dense %s %s %s candidate %zu: %.4f ms (%.0f TFLOP/s) %s\n", p.job, p.name, g.name, i, ms,
                    flop / ms / 1e9, candidates[i].description.c_str());
      }
      if (first < 0) continue;
      std::printf("dense %s %s %s: first %.4f ms (%.0f TFLOP/s), best candidate %zu %.4f ms (%.0f TFLOP/s)\n", p.job,
                  p.name, g.name, first, flop / first / 1e9, best_index, best, flop / best / 1e9);
      heuristic_total += first * double(p.per_step);
      best_total += best * double(p.per_step);
    }
  }
  report_job();
}

}  // namespace
}  // namespace moetune
