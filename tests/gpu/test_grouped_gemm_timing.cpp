// Not a check: what grouping costs the experts' GEMMs. Each of Moonlight-16B-A3B's four expert products (8192
// tokens x top-6 = 49,152 rows, hidden 2048, experts' width 1408) runs three ways with the same FLOPs: as 64
// groups of 768 rows (the engine's balanced case), as one group of all the rows (the same CUTLASS kernel with
// no group switches: every tile of a persistent CTA after its first changes group in the 64-group case), and as
// one dense cuBLASLt GEMM. The gap between the first two is what the per-group TMA descriptors and partial tiles
// cost; the gap to cuBLASLt what the kernel itself leaves. Rounds interleaved (the clocks drift under the power
// cap), the best round reported. Run with
//   moetune_tests --gtest_also_run_disabled_tests --gtest_filter='GroupedGemmTiming.*'
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_tiled_random.h"
#include "gpu_timing.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/grouped_gemm.h"
#include "moetune/ops/cuda/grouped_gemm_kernels.h"

namespace moetune {
namespace {

using testing::tiled_random;

const Device kGpu = Device::cuda();

class GroupedGemmTiming : public testing::GpuTest {};

Tensor uniform_offsets(int64_t groups, int64_t rows) {
  std::vector<int32_t> offsets(size_t(groups) + 1);
  for (int64_t e = 0; e <= groups; ++e) offsets[size_t(e)] = int32_t(rows * e / groups);
  return Tensor::from_vector(offsets, {groups + 1}).to(kGpu);
}

struct Variant {
  std::string name;
  std::function<void()> run;
  double best_ms = 1e30;
};

void time_rounds(const char* product, double flops, std::vector<Variant>& variants) {
  for (int round = 0; round < 4; ++round)
    for (Variant& v : variants) v.best_ms = std::min(v.best_ms, testing::mean_gpu_ms(v.run, 3, 15));
  for (const Variant& v : variants)
    std::printf("%-28s %-34s %8.3f ms %6.0f TFLOP/s\n", product, v.name.c_str(), v.best_ms, flops / v.best_ms * 1e-9);
}

TEST_F(GroupedGemmTiming, DISABLED_GroupsAgainstOneGroupAndDense) {
  constexpr int64_t kRows = 49152, kHidden = 2048, kInner = 1408, kExperts = 64;
  std::mt19937 rng(7);
  const Tensor offsets64 = uniform_offsets(kExperts, kRows), offsets1 = uniform_offsets(1, kRows);
  const Tensor x = tiled_random(kRows, kHidden, rng, 1.0f);
  const Tensor activated = tiled_random(kRows, kInner, rng, 1.0f);
  const Tensor dgate_up = tiled_random(kRows, 2 * kInner, rng, 1e-3f);
  const Tensor gate_up = tiled_random(kExperts * 2 * kInner, kHidden, rng, 0.02f).view({kExperts, 2 * kInner, kHidden});
  const Tensor down = tiled_random(kExperts * kHidden, kInner, rng, 0.02f).view({kExperts, kHidden, kInner});
  const Tensor gate_up0 = gate_up.narrow(0, 1), down0 = down.narrow(0, 1);
  const Tensor gate_up0_2d = gate_up0.view({2 * kInner, kHidden});
  Tensor gate_up_out = Tensor::empty({kRows, 2 * kInner}, DType::BF16, kGpu);
  Tensor down_out = Tensor::empty({kRows, kHidden}, DType::BF16, kGpu);
  Tensor dx = Tensor::empty({kRows, kHidden}, DType::BF16, kGpu);
  Tensor dw64 = Tensor::empty(gate_up.shape(), DType::BF16, kGpu);
  Tensor dw1 = Tensor::empty({1, 2 * kInner, kHidden}, DType::BF16, kGpu);
  Tensor dw1_2d = dw1.view({2 * kInner, kHidden});
  const double gate_up_flops = 2.0 * kRows * kHidden * 2 * kInner, down_flops = 2.0 * kRows * kHidden * kInner;

  std::vector<Variant> forward{
      {"64 groups", [&] { ops::cuda::grouped_matmul(x, gate_up, true, offsets64, gate_up_out); }},
      {"1 group", [&] { ops::cuda::grouped_matmul(x, gate_up0, true, offsets1, gate_up_out); }},
      {"cuBLASLt dense", [&] { ops::cuda::matmul(x, false, gate_up0_2d, true, gate_up_out); }}};
  time_rounds("gate_up forward", gate_up_flops, forward);

  std::vector<Variant> down_forward{
      {"64 groups", [&] { ops::cuda::grouped_matmul(activated, down, true, offsets64, down_out); }},
      {"1 group", [&] { ops::cuda::grouped_matmul(activated, down0, true, offsets1, down_out); }}};
  time_rounds("down forward", down_flops, down_forward);

  std::vector<Variant> input_grad{
      {"64 groups", [&] { ops::cuda::grouped_matmul(dgate_up, gate_up, false, offsets64, dx); }},
      {"1 group", [&] { ops::cuda::grouped_matmul(dgate_up, gate_up0, false, offsets1, dx); }},
      {"cuBLASLt dense", [&] { ops::cuda::matmul(dgate_up, false, gate_up0_2d, false, dx); }}};
  time_rounds("gate_up input gradient", gate_up_flops, input_grad);

  std::vector<Variant> weight_grad{
      {"64 groups (K 768 each)", [&] { ops::cuda::grouped_matmul_weight_grad(dgate_up, x, offsets64, dw64, false); }},
      {"1 group (K 49152)", [&] { ops::cuda::grouped_matmul_weight_grad(dgate_up, x, offsets1, dw1, false); }},
      {"cuBLASLt dense (K 49152)", [&] { ops::cuda::matmul(dgate_up, true, x, false, dw1_2d); }}};
  time_rounds("gate_up weight gradient", gate_up_flops, weight_grad);
}

// Not a check: the weight gradient's two schedules (grouped_gemm_kernels.h's WeightGradSchedule) at the experts'
// row counts of three models at 8192 tokens: DeepSeek-V3 (256 experts, top-8: 256 rows each), Qwen3-30B (128,
// top-8: 512) and Moonlight (64, top-6: 768), norm partials on as in the step: the data behind the engine's rule.
TEST_F(GroupedGemmTiming, DISABLED_WeightGradSchedules) {
  struct Problem {
    const char* name;
    int64_t experts, rows, n, k;
  };
  const Problem problems[] = {
      {"dsv3 gate_up dW", 256, 65536, 4096, 7168},     {"dsv3 down dW", 256, 65536, 7168, 2048},
      {"qwen3 gate_up dW", 128, 65536, 1536, 2048},    {"qwen3 down dW", 128, 65536, 2048, 768},
      {"moonlight gate_up dW", 64, 49152, 2816, 2048}, {"moonlight down dW", 64, 49152, 2048, 1408}};
  std::mt19937 rng(11);
  for (const Problem& p : problems) {
    const Tensor offsets = uniform_offsets(p.experts, p.rows);
    const Tensor dy = tiled_random(p.rows, p.n, rng, 1e-3f);
    const Tensor x = tiled_random(p.rows, p.k, rng, 1.0f);
    Tensor dw = Tensor::empty({p.experts, p.n, p.k}, DType::BF16, kGpu);
    Tensor partials = Tensor::empty({ops::cuda::grouped_weight_grad_norm_slots(dw)}, DType::F32, kGpu);
    auto with = [&](ops::cuda::WeightGradSchedule schedule) {
      return [&, schedule] {
        ops::cuda::set_weight_grad_schedule(schedule);
        ops::cuda::grouped_matmul_weight_grad(dy, x, offsets, dw, false, partials);
      };
    };
    std::vector<Variant> variants{{"ping-pong 64x256", with(ops::cuda::WeightGradSchedule::PingPong)},
                                  {"cooperative 128x256", with(ops::cuda::WeightGradSchedule::Cooperative)}};
    time_rounds(p.name, 2.0 * double(p.rows) * double(p.n) * double(p.k), variants);
  }
  ops::cuda::set_weight_grad_schedule(ops::cuda::WeightGradSchedule::ByRows);
}

}  // namespace
}  // namespace moetune
