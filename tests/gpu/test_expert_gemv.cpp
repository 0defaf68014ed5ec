// The one-token expert kernels (ops/cuda/expert_gemv.h) against an fp32 CPU computation on the same bf16 inputs:
// the activated rows of each chosen expert (SwiGLU, and relu² over an ungated projection) and the weighted sum with the
// residual, on the vectorised path
// (Qwen3-30B-A3B's expert shape) and the scalar one (widths that are not multiples of 8), with the output written
// over the residual as the MoE block does. Then the time of one token's experts on this path and on the grouped
// GEMMs the training path runs, printed for docs/benchmarks.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/activation.h"
#include "moetune/ops/cuda/expert_gemv.h"
#include "moetune/ops/cuda/grouped_gemm.h"

namespace moetune {
namespace {

struct Shape3 {
  int64_t experts, top_k, hidden, inner;
};

struct Inputs {
  Tensor x, gate_up, down, residual, expert_ids, weights;
  std::vector<int32_t> ids;
  std::vector<float> w;
};

Inputs make_inputs(const Shape3& s, std::mt19937& rng, bool gated = true) {
  const Device gpu = Device::cuda();
  Inputs in;
  in.x = testing::random_normal({1, s.hidden}, DType::BF16, gpu, rng);
  in.gate_up = testing::random_normal({s.experts, (gated ? 2 : 1) * s.inner, s.hidden}, DType::BF16, gpu, rng, 0.05f);
  in.down = testing::random_normal({s.experts, s.hidden, s.inner}, DType::BF16, gpu, rng, 0.05f);
  in.residual = testing::random_normal({1, s.hidden}, DType::BF16, gpu, rng);
  std::vector<int32_t> all(size_t(s.experts));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  in.ids.assign(all.begin(), all.begin() + s.top_k);
  std::uniform_real_distribution<float> share(0.05f, 1.0f);
  for (int64_t i = 0; i < s.top_k; ++i) in.w.push_back(share(rng));
  in.expert_ids = Tensor::from_vector(in.ids, {1, s.top_k}).to(gpu);
  in.weights = Tensor::from_vector(in.w, {1, s.top_k}).to(gpu);
  return in;
}

class ExpertGemvGpu : public testing::GpuTest {
 protected:
  void check(const Shape3& s, ops::cuda::ExpertActivation activation = ops::cuda::ExpertActivation::SwiGLU) {
    const bool gated = activation == ops::cuda::ExpertActivation::SwiGLU;
    SCOPED_TRACE(::testing::Message() << "seed " << seed() << ", E " << s.experts << ", k " << s.top_k << ", H "
                                      << s.hidden << ", I " << s.inner << (gated ? ", SwiGLU" : ", relu²"));
    const Inputs in = make_inputs(s, rng(), gated);
    const Tensor activated = testing::poisoned({s.top_k, s.inner}, DType::BF16, Device::cuda());
    ops::cuda::expert_up_activation(in.x, in.gate_up, in.expert_ids, activated, activation);
    // The experts' part alone (a zero residual), so that the bf16 rounding of a large residual does not hide it;
    // then written over a real residual, as the MoE block may.
    const Tensor zero = Tensor::zeros({1, s.hidden}, DType::BF16, Device::cuda());
    const Tensor experts_only = testing::poisoned({1, s.hidden}, DType::BF16, Device::cuda());
    ops::cuda::expert_down_combine(activated, in.down, in.expert_ids, in.weights, zero, experts_only);
    const Tensor out = in.residual.clone();
    const Tensor residual = testing::to_cpu_f32(in.residual);
    ops::cuda::expert_down_combine(activated, in.down, in.expert_ids, in.weights, out, out);

    const Tensor x = testing::to_cpu_f32(in.x), gate_up = testing::to_cpu_f32(in.gate_up), down = testing::to_cpu_f32(in.down);
    Tensor expected_activated = Tensor::empty({s.top_k, s.inner}, DType::F32);
    Tensor expected_out = residual.clone();
    for (int64_t slot = 0; slot < s.top_k; ++slot) {
      const int64_t e = in.ids[size_t(slot)];
      float* a = expected_activated.data<float>() + slot * s.inner;
      for (int64_t j = 0; j < s.inner; ++j) {
        double gate = 0, up = 0;
        if (gated) {
          const float* g_row = gate_up.data<float>() + (e * 2 * s.inner + j) * s.hidden;
          const float* u_row = g_row + s.inner * s.hidden;
          for (int64_t h = 0; h < s.hidden; ++h) {
            gate += double(g_row[h]) * x.data<float>()[h];
            up += double(u_row[h]) * x.data<float>()[h];
          }
          a[j] = float(gate / (1.0 + std::exp(-gate)) * up);
        } else {
          const float* u_row = gate_up.data<float>() + (e * s.inner + j) * s.hidden;
          for (int64_t h = 0; h < s.hidden; ++h) up += double(u_row[h]) * x.data<float>()[h];
          a[j] = float(std::max(up, 0.0) * std::max(up, 0.0));
        }
      }
      for (int64_t c = 0; c < s.hidden; ++c) {
        const float* d_row = down.data<float>() + (e * s.hidden + c) * s.inner;
        double y = 0;
        for (int64_t j = 0; j < s.inner; ++j) y += double(d_row[j]) * a[j];
        expected_out.data<float>()[c] += float(in.w[size_t(slot)] * y);
      }
    }
    EXPECT_LT(testing::relative_error(testing::to_cpu_f32(activated), expected_activated), testing::kBf16Tolerance);
    Tensor experts_part = expected_out.clone();
    for (int64_t c = 0; c < s.hidden; ++c) experts_part.data<float>()[c] -= residual.data<float>()[c];
    EXPECT_LT(testing::relative_error(testing::to_cpu_f32(experts_only), experts_part), testing::kBf16Tolerance);
    EXPECT_LT(testing::relative_error(testing::to_cpu_f32(out), expected_out), testing::kBf16Tolerance);
  }
};

TEST_F(ExpertGemvGpu, MatchesTheCpu) {
  check({.experts = 128, .top_k = 8, .hidden = 2048, .inner = 768});  // Qwen3-30B-A3B, 16-byte loads
  check({.experts = 8, .top_k = 2, .hidden = 32, .inner = 16});        // the tiny fixtures
  check({.experts = 6, .top_k = 3, .hidden = 36, .inner = 20});        // not multiples of 8: the scalar path
  check({.experts = 4, .top_k = 1, .hidden = 64, .inner = 24});
  // Nemotron-3-Nano's relu² experts (in a latent width of 1024), vectorised and scalar.
  check({.experts = 128, .top_k = 6, .hidden = 1024, .inner = 1856}, ops::cuda::ExpertActivation::ReluSquared);
  check({.experts = 6, .top_k = 3, .hidden = 36, .inner = 20}, ops::cuda::ExpertActivation::ReluSquared);
}

// One token through 8 of 128 experts of Qwen3-30B-A3B's shape: this path against the grouped GEMMs (+ SwiGLU)
// of the training path on the same 8 rows in expert-major order. Printed, not asserted.
TEST_F(ExpertGemvGpu, OneTokenTimeAgainstTheGroupedGemm) {
  const Shape3 s{.experts = 128, .top_k = 8, .hidden = 2048, .inner = 768};
  Inputs in = make_inputs(s, rng());
  std::sort(in.ids.begin(), in.ids.end());
  in.expert_ids = Tensor::from_vector(in.ids, {1, s.top_k}).to(Device::cuda());
  std::vector<int32_t> offsets(size_t(s.experts + 1), 0);
  for (int32_t id : in.ids) ++offsets[size_t(id) + 1];
  std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
  const Tensor device_offsets = Tensor::from_vector(offsets, {s.experts + 1}).to(Device::cuda());
  const Tensor rows = testing::random_normal({s.top_k, s.hidden}, DType::BF16, Device::cuda(), rng());
  const Tensor gate_up_out = Tensor::empty({s.top_k, 2 * s.inner}, DType::BF16, Device::cuda());
  const Tensor activated = Tensor::empty({s.top_k, s.inner}, DType::BF16, Device::cuda());
  const Tensor expert_out = Tensor::empty({s.top_k, s.hidden}, DType::BF16, Device::cuda());
  const Tensor out = Tensor::empty({1, s.hidden}, DType::BF16, Device::cuda());
  const auto time_us = [](const auto& run) {
    for (int i = 0; i < 20; ++i) run();
    gpu::synchronize();
    constexpr int kRepeats = 500;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRepeats; ++i) run();
    gpu::synchronize();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kRepeats;
  };
  const double gemv = time_us([&] {
    ops::cuda::expert_up_activation(in.x, in.gate_up, in.expert_ids, activated, ops::cuda::ExpertActivation::SwiGLU);
    ops::cuda::expert_down_combine(activated, in.down, in.expert_ids, in.weights, in.residual, out);
  });
  const double grouped = time_us([&] {
    ops::cuda::grouped_matmul(rows, in.gate_up, true, device_offsets, gate_up_out);
    ops::cuda::swiglu_forward(gate_up_out, activated);
    ops::cuda::grouped_matmul(activated, in.down, true, device_offsets, expert_out);
  });
  const double bytes = double(s.top_k) * 3 * double(s.inner) * double(s.hidden) * 2;
  std::printf("one token, 8 of 128 experts (H 2048, I 768): gemv path %.1f us (%.0f GB/s of expert weights), "
              "grouped GEMM path %.1f us (without its permute and combine)\n",
              gemv, bytes / gemv / 1e3, grouped);
  EXPECT_GT(gemv, 0.0);
}

}  // namespace
}  // namespace moetune
