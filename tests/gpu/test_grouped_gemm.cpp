// The experts' grouped GEMMs (ops/cuda/grouped_gemm.h, CUTLASS SM90) against a CPU loop over experts in fp32
// on the same bf16 values: empty groups first, in the middle and last, every group empty, one group holding
// every row, and sizes that are not multiples of the tiles (64x256x64, with 2x1 clusters).
#include <gtest/gtest.h>

#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/cuda/grouped_gemm.h"
#include "moetune/ops/cuda/grouped_gemm_kernels.h"
#include "moetune/ops/linear.h"

namespace moetune {
namespace {

using testing::kBf16Tolerance;
using testing::poisoned;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

class GroupedGemmGpu : public testing::GpuTest {};

// Expert-major rows: group e owns rows [offsets[e], offsets[e+1]).
struct Groups {
  std::vector<int64_t> offsets;  // host copy, [E+1]
  Tensor device_offsets;         // I32 [E+1] on the GPU
  int64_t count() const { return int64_t(offsets.size()) - 1; }
  int64_t rows() const { return offsets.back(); }
  int64_t begin(int64_t e) const { return offsets[size_t(e)]; }
  int64_t size(int64_t e) const { return offsets[size_t(e) + 1] - offsets[size_t(e)]; }
};

Groups make_groups(const std::vector<int64_t>& sizes) {
  Groups groups;
  groups.offsets.assign(1, 0);
  for (int64_t size : sizes) groups.offsets.push_back(groups.offsets.back() + size);
  const std::vector<int32_t> offsets32(groups.offsets.begin(), groups.offsets.end());
  groups.device_offsets = Tensor::from_vector(offsets32, {int64_t(offsets32.size())}).to(Device::cuda());
  return groups;
}

std::string describe(const std::vector<int64_t>& sizes, int64_t n, int64_t k) {
  std::string text = "group sizes {";
  for (size_t i = 0; i < sizes.size(); ++i) text += (i ? ", " : "") + std::to_string(sizes[i]);
  return text + "}, N " + std::to_string(n) + ", K " + std::to_string(k);
}

Tensor transposed(const Tensor& m) {  // CPU f32 [a, b] -> [b, a]
  const int64_t a = m.size(0), b = m.size(1);
  Tensor t = Tensor::empty({b, a}, DType::F32);
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) t.data<float>()[j * a + i] = m.data<float>()[i * b + j];
  return t;
}

// out[rows_e] = x[rows_e] · op(W_e) on CPU f32 copies.
Tensor reference_grouped_matmul(const Tensor& x, const Tensor& weights, bool transpose_w, const Groups& groups) {
  const Tensor xh = to_cpu_f32(x), wh = to_cpu_f32(weights);
  const int64_t n = transpose_w ? weights.size(1) : weights.size(2);
  Tensor out = Tensor::zeros({x.size(0), n}, DType::F32);
  for (int64_t e = 0; e < groups.count(); ++e) {
    if (groups.size(e) == 0) continue;
    const Tensor w_as_linear = transpose_w ? wh[e].clone() : transposed(wh[e]);  // linear wants [N, K]
    out.narrow(groups.begin(e), groups.size(e)).copy_from(ops::linear_forward(xh.narrow(groups.begin(e), groups.size(e)), w_as_linear));
  }
  return out;
}

// dW_e (+)= dy[rows_e]ᵀ · x[rows_e] on CPU f32 copies, starting from `initial` (CPU f32) or zeros.
Tensor reference_weight_grad(const Tensor& dy, const Tensor& x, const Groups& groups, const Tensor& initial) {
  const Tensor dyh = to_cpu_f32(dy), xh = to_cpu_f32(x);
  const int64_t n = dy.size(1), k = x.size(1);
  Tensor dw = initial.defined() ? initial.clone() : Tensor::zeros({groups.count(), n, k}, DType::F32);
  const Tensor unused_weight = Tensor::zeros({n, k}, DType::F32);
  for (int64_t e = 0; e < groups.count(); ++e) {
    if (groups.size(e) == 0) continue;
    ops::linear_backward(dyh.narrow(groups.begin(e), groups.size(e)), xh.narrow(groups.begin(e), groups.size(e)),
                         unused_weight, dw[e]);
  }
  return dw;
}

void expect_same_values(const Tensor& actual, const Tensor& expected, const std::string& what) {
  const Tensor a = to_cpu_f32(actual), b = to_cpu_f32(expected);
  ASSERT_EQ(a.numel(), b.numel()) << what;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < a.numel(); ++i) mismatches += !(a.data<float>()[i] == b.data<float>()[i]);
  EXPECT_EQ(mismatches, 0) << what;
}

// Group layouts every test runs: empty groups first, in the middle and last; one group with every row; tiny
// groups; groups larger than one 128-row tile and not a multiple of it.
const std::vector<std::vector<int64_t>> kGroupSizes = {
    {0, 37, 1, 200, 0}, {0, 0, 333, 0, 0}, {333}, {300, 0, 129, 513, 7}, {1, 1, 1, 1, 1}};
// (N, K) pairs: multiples of 8 but not of the 256-wide N tile or the 64-deep K tile, and one of several tiles.
const std::vector<std::pair<int64_t, int64_t>> kSizes = {{64, 136}, {136, 64}, {264, 200}, {72, 520}};

// Every weight-gradient check runs under both schedules (grouped_gemm_kernels.h: the engine picks one by the
// experts' average row count, and these groups are all small): ping-pong 64x256 and cooperative 128x256.
struct WeightGradScheduleScope {
  explicit WeightGradScheduleScope(ops::cuda::WeightGradSchedule schedule) {
    ops::cuda::set_weight_grad_schedule(schedule);
  }
  ~WeightGradScheduleScope() { ops::cuda::set_weight_grad_schedule(ops::cuda::WeightGradSchedule::ByRows); }
};
const ops::cuda::WeightGradSchedule kWeightGradSchedules[] = {ops::cuda::WeightGradSchedule::PingPong,
                                                              ops::cuda::WeightGradSchedule::Cooperative};
const char* name_of(ops::cuda::WeightGradSchedule schedule) {
  return schedule == ops::cuda::WeightGradSchedule::PingPong ? "ping-pong" : "cooperative";
}

TEST_F(GroupedGemmGpu, RowsTimesWeightMatchesCpu) {
  SCOPED_TRACE(seed());
  for (bool transpose_w : {true, false})
    for (const auto& sizes : kGroupSizes)
      for (const auto& [n, k] : kSizes) {
        SCOPED_TRACE(describe(sizes, n, k) + (transpose_w ? ", W [E, N, K]" : ", W [E, K, N]"));
        const Groups groups = make_groups(sizes);
        const Tensor x = random_normal({groups.rows(), k}, DType::BF16, Device::cuda(), rng());
        const Tensor w = random_normal(transpose_w ? Shape{groups.count(), n, k} : Shape{groups.count(), k, n},
                                       DType::BF16, Device::cuda(), rng());
        const Tensor out = poisoned({groups.rows(), n}, DType::BF16, Device::cuda());
        ops::cuda::grouped_matmul(x, w, transpose_w, groups.device_offsets, out);
        EXPECT_LT(relative_error(out, reference_grouped_matmul(x, w, transpose_w, groups)), kBf16Tolerance);
      }
}

// out += alpha · x·op(W) in the epilogue (LoRA's scaled low-rank product added into the experts' outputs): the
// groups' rows get it, rows past offsets[E] keep what they held.
TEST_F(GroupedGemmGpu, RowsTimesWeightScalesAndAccumulates) {
  SCOPED_TRACE(seed());
  const float alpha = 0.375f;
  for (bool transpose_w : {true, false})
    for (const auto& sizes : kGroupSizes) {
      const int64_t n = 136, k = 16;  // K = a LoRA rank
      SCOPED_TRACE(describe(sizes, n, k) + (transpose_w ? ", W [E, N, K]" : ", W [E, K, N]"));
      const Groups groups = make_groups(sizes);
      const int64_t rows = groups.rows() + 5;  // padding rows the GEMM must leave alone
      const Tensor x = random_normal({rows, k}, DType::BF16, Device::cuda(), rng());
      const Tensor w = random_normal(transpose_w ? Shape{groups.count(), n, k} : Shape{groups.count(), k, n}, DType::BF16,
                                     Device::cuda(), rng());
      const Tensor out = random_normal({rows, n}, DType::BF16, Device::cuda(), rng());
      Tensor expected = to_cpu_f32(out);
      const Tensor product = reference_grouped_matmul(x.narrow(0, groups.rows()), w, transpose_w, groups);
      for (int64_t i = 0; i < product.numel(); ++i) expected.data<float>()[i] += alpha * product.data<float>()[i];
      ops::cuda::grouped_matmul(x, w, transpose_w, groups.device_offsets, out, alpha, /*accumulate=*/true);
      EXPECT_LT(relative_error(out, expected), kBf16Tolerance);
      expect_same_values(to_cpu_f32(out).narrow(groups.rows(), 5).clone(), expected.narrow(groups.rows(), 5).clone(),
                         "rows past the groups");
    }
}

TEST_F(GroupedGemmGpu, WeightGradMatchesCpu) {
  SCOPED_TRACE(seed());
  for (const auto schedule : kWeightGradSchedules) {
    const WeightGradScheduleScope scope(schedule);
    SCOPED_TRACE(name_of(schedule));
    for (bool accumulate : {false, true})
      for (const auto& sizes : kGroupSizes)
        for (const auto& [n, k] : kSizes) {
          SCOPED_TRACE(describe(sizes, n, k) + (accumulate ? ", accumulating" : ", overwriting"));
          const Groups groups = make_groups(sizes);
          const Tensor dy = random_normal({groups.rows(), n}, DType::BF16, Device::cuda(), rng());
          const Tensor x = random_normal({groups.rows(), k}, DType::BF16, Device::cuda(), rng());
          const Tensor dw = accumulate ? random_normal({groups.count(), n, k}, DType::BF16, Device::cuda(), rng())
                                       : poisoned({groups.count(), n, k}, DType::BF16, Device::cuda());
          const Tensor initial = accumulate ? to_cpu_f32(dw) : Tensor{};
          ops::cuda::grouped_matmul_weight_grad(dy, x, groups.device_offsets, dw, accumulate);
          const Tensor expected = reference_weight_grad(dy, x, groups, initial);
          EXPECT_LT(relative_error(dw, expected), kBf16Tolerance);
          // An empty group's dW_e is exactly 0, or exactly what it was when accumulating.
          const Tensor got = to_cpu_f32(dw);
          for (int64_t e = 0; e < groups.count(); ++e)
            if (groups.size(e) == 0) expect_same_values(got[e], expected[e], "empty group " + std::to_string(e));
        }
  }
}

// The weight gradient's norm partials (grouped_matmul_weight_grad's last argument): their sum is Σ dW² over the
// bf16 values written (fp32 sums of up to 4,096 squares a warp's slot, so a few ulps apart from a double sum),
// dW itself is what it is without them, empty groups and partial tiles included, and two runs give the same bits.
// Accumulating with partials is refused (an accumulated dW's empty groups hold sums no tile visits).
TEST_F(GroupedGemmGpu, WeightGradSumsItsSquares) {
  SCOPED_TRACE(seed());
  for (const auto schedule : kWeightGradSchedules) {
    const WeightGradScheduleScope scope(schedule);
    SCOPED_TRACE(name_of(schedule));
    for (const auto& sizes : kGroupSizes)
      for (const auto& [n, k] : kSizes) {
        SCOPED_TRACE(describe(sizes, n, k));
        const Groups groups = make_groups(sizes);
        const Tensor dy = random_normal({groups.rows(), n}, DType::BF16, Device::cuda(), rng());
        const Tensor x = random_normal({groups.rows(), k}, DType::BF16, Device::cuda(), rng());
        const Tensor plain = poisoned({groups.count(), n, k}, DType::BF16, Device::cuda());
        const Tensor summed = poisoned({groups.count(), n, k}, DType::BF16, Device::cuda());
        const int64_t slots = ops::cuda::grouped_weight_grad_norm_slots(summed);
        // Stale values in both: every slot must be written (empty groups' with 0).
        const Tensor partials =
            Tensor::from_vector(std::vector<float>(size_t(slots), 1e30f), {slots}).to(Device::cuda());
        const Tensor again = Tensor::from_vector(std::vector<float>(size_t(slots), -1.0f), {slots}).to(Device::cuda());
        ops::cuda::grouped_matmul_weight_grad(dy, x, groups.device_offsets, plain, /*accumulate=*/false);
        ops::cuda::grouped_matmul_weight_grad(dy, x, groups.device_offsets, summed, /*accumulate=*/false, partials);
        expect_same_values(summed, plain, "dW with partials");
        const Tensor values = to_cpu_f32(summed);
        double expected = 0;
        for (int64_t i = 0; i < values.numel(); ++i)
          expected += double(values.data<float>()[i]) * values.data<float>()[i];
        const Tensor host = partials.to(Device::cpu());
        double total = 0;
        for (int64_t i = 0; i < slots; ++i) total += host.data<float>()[i];
        EXPECT_NEAR(total, expected, 1e-5 * expected + 1e-30);
        ops::cuda::grouped_matmul_weight_grad(dy, x, groups.device_offsets, summed, /*accumulate=*/false, again);
        expect_same_values(again.to(Device::cpu()), host, "partials of a second run");
      }
  }
  const Groups groups = make_groups({3, 5});
  const Tensor dy = random_normal({8, 64}, DType::BF16, Device::cuda(), rng());
  const Tensor x = random_normal({8, 64}, DType::BF16, Device::cuda(), rng());
  const Tensor dw = random_normal({2, 64, 64}, DType::BF16, Device::cuda(), rng());
  const Tensor partials = Tensor::zeros({ops::cuda::grouped_weight_grad_norm_slots(dw)}, DType::F32).to(Device::cuda());
  EXPECT_THROW(ops::cuda::grouped_matmul_weight_grad(dy, x, groups.device_offsets, dw, /*accumulate=*/true, partials), Error);
  const Tensor short_partials = Tensor::zeros({1}, DType::F32).to(Device::cuda());
  EXPECT_THROW(ops::cuda::grouped_matmul_weight_grad(dy, x, groups.device_offsets, dw, false, short_partials), Error);
}

TEST_F(GroupedGemmGpu, AllGroupsEmpty) {
  SCOPED_TRACE(seed());
  const int64_t experts = 5, n = 64, k = 136;
  const Groups groups = make_groups(std::vector<int64_t>(experts, 0));
  const Tensor x = random_normal({0, k}, DType::BF16, Device::cuda(), rng());
  const Tensor dy = random_normal({0, n}, DType::BF16, Device::cuda(), rng());
  for (bool transpose_w : {true, false}) {
    const Tensor w = random_normal(transpose_w ? Shape{experts, n, k} : Shape{experts, k, n}, DType::BF16,
                                   Device::cuda(), rng());
    const Tensor out = poisoned({0, n}, DType::BF16, Device::cuda());
    ops::cuda::grouped_matmul(x, w, transpose_w, groups.device_offsets, out);
    EXPECT_EQ(out.numel(), 0);
  }
  for (const auto schedule : kWeightGradSchedules) {
    const WeightGradScheduleScope scope(schedule);
    SCOPED_TRACE(name_of(schedule));
    const Tensor overwritten = poisoned({experts, n, k}, DType::BF16, Device::cuda());
    ops::cuda::grouped_matmul_weight_grad(dy, x, groups.device_offsets, overwritten, /*accumulate=*/false);
    expect_same_values(overwritten, Tensor::zeros({experts, n, k}, DType::F32), "overwriting");
    const Tensor accumulated = random_normal({experts, n, k}, DType::BF16, Device::cuda(), rng());
    const Tensor before = to_cpu_f32(accumulated);
    ops::cuda::grouped_matmul_weight_grad(dy, x, groups.device_offsets, accumulated, /*accumulate=*/true);
    expect_same_values(accumulated, before, "accumulating");
  }
}

// Calls on the same stream back to back: the stream-ordered scratch of one call must not disturb the next.
TEST_F(GroupedGemmGpu, ConsecutiveCallsAgree) {
  SCOPED_TRACE(seed());
  const Groups groups = make_groups({0, 37, 1, 200, 0});
  const int64_t n = 136, k = 64;
  const Tensor x = random_normal({groups.rows(), k}, DType::BF16, Device::cuda(), rng());
  const Tensor w = random_normal({groups.count(), n, k}, DType::BF16, Device::cuda(), rng());
  const Tensor first = poisoned({groups.rows(), n}, DType::BF16, Device::cuda());
  const Tensor second = poisoned({groups.rows(), n}, DType::BF16, Device::cuda());
  ops::cuda::grouped_matmul(x, w, true, groups.device_offsets, first);
  ops::cuda::grouped_matmul(x, w, true, groups.device_offsets, second);
  EXPECT_LT(relative_error(first, reference_grouped_matmul(x, w, true, groups)), kBf16Tolerance);
  expect_same_values(second, first, "second call");
}

TEST_F(GroupedGemmGpu, RejectsSizesThatAreNotMultiplesOf8) {
  const Groups groups = make_groups({3, 4});
  const Tensor x = Tensor::zeros({7, 60}, DType::BF16).to(Device::cuda());
  const Tensor w = Tensor::zeros({2, 64, 60}, DType::BF16).to(Device::cuda());
  const Tensor out = Tensor::zeros({7, 64}, DType::BF16).to(Device::cuda());
  EXPECT_THROW(ops::cuda::grouped_matmul(x, w, true, groups.device_offsets, out), Error);
  const Tensor dw = Tensor::zeros({2, 64, 60}, DType::BF16).to(Device::cuda());
  EXPECT_THROW(ops::cuda::grouped_matmul_weight_grad(out, x, groups.device_offsets, dw, false), Error);
}

}  // namespace
}  // namespace moetune
