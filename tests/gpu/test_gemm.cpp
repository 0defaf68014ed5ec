// cuBLASLt GEMMs (ops/cuda/gemm.h) against the fp32 CPU reference: inputs are bf16 on the GPU and the same
// values cast back to f32 on the CPU, so only accumulation order and output rounding differ.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/gemm_candidates.h"
#include "moetune/ops/linear.h"

namespace moetune {
namespace {

using testing::kBf16Tolerance;
using testing::poisoned;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

// An F32 output differs from the reference only by fp32 summation order (bf16 products are exact in fp32).
constexpr double kF32OutputTolerance = 1e-4;

double tolerance_for(DType output) { return output == DType::F32 ? kF32OutputTolerance : kBf16Tolerance; }

// alpha · op(A)·op(B) + beta · D0 in double, on CPU f32 copies; d0 (CPU F32) may be undefined when beta is 0.
Tensor reference_matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, int64_t m, int64_t k,
                        int64_t n, float alpha, float beta, const Tensor& d0) {
  const Tensor ah = to_cpu_f32(a), bh = to_cpu_f32(b);
  Tensor d = Tensor::zeros({m, n}, DType::F32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double x = ah.data<float>()[transpose_a ? p * m + i : i * k + p];
        const double y = bh.data<float>()[transpose_b ? j * k + p : p * n + j];
        sum += x * y;
      }
      double value = alpha * sum;
      if (beta != 0.0f) value += double(beta) * d0.data<float>()[i * n + j];
      d.data<float>()[i * n + j] = float(value);
    }
  return d;
}

class GemmGpu : public testing::GpuTest {};
class LinearGpu : public testing::GpuTest {};

TEST_F(GemmGpu, EveryTransposeAndOutputTypeMatchesCpu) {
  SCOPED_TRACE(seed());
  const int64_t m = 37, k = 70, n = 53;
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true})
      for (DType out : {DType::BF16, DType::F32})
        for (int repeat = 0; repeat < 2; ++repeat) {  // the second call reuses the cached plan
          SCOPED_TRACE(::testing::Message() << "transpose_a " << transpose_a << " transpose_b " << transpose_b
                                            << " out " << dtype_name(out) << " repeat " << repeat);
          const Tensor a = random_normal(transpose_a ? Shape{k, m} : Shape{m, k}, DType::BF16, Device::cuda(), rng());
          const Tensor b = random_normal(transpose_b ? Shape{n, k} : Shape{k, n}, DType::BF16, Device::cuda(), rng());
          const Tensor d = poisoned({m, n}, out, Device::cuda());
          ops::cuda::matmul(a, transpose_a, b, transpose_b, d);
          const Tensor expected = reference_matmul(a, transpose_a, b, transpose_b, m, k, n, 1.0f, 0.0f, {});
          EXPECT_LT(relative_error(d, expected), tolerance_for(out));
        }
}

TEST_F(GemmGpu, BetaOneAccumulatesWithAlpha) {
  SCOPED_TRACE(seed());
  const int64_t m = 37, k = 70, n = 53;
  for (DType out : {DType::BF16, DType::F32})
    for (bool transpose_a : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "out " << dtype_name(out) << " transpose_a " << transpose_a);
      const Tensor a = random_normal(transpose_a ? Shape{k, m} : Shape{m, k}, DType::BF16, Device::cuda(), rng());
      const Tensor b = random_normal({n, k}, DType::BF16, Device::cuda(), rng());
      const Tensor d = random_normal({m, n}, out, Device::cuda(), rng());
      const Tensor d0 = to_cpu_f32(d);
      ops::cuda::matmul(a, transpose_a, b, true, d, 0.5f, 1.0f);
      const Tensor expected = reference_matmul(a, transpose_a, b, true, m, k, n, 0.5f, 1.0f, d0);
      EXPECT_LT(relative_error(d, expected), tolerance_for(out));
    }
}

TEST_F(GemmGpu, LargerTileAlignedShapesMatchCpu) {
  SCOPED_TRACE(seed());
  const int64_t m = 256, k = 512, n = 384;
  const Tensor a = random_normal({m, k}, DType::BF16, Device::cuda(), rng());
  const Tensor b = random_normal({n, k}, DType::BF16, Device::cuda(), rng());
  const Tensor d = poisoned({m, n}, DType::BF16, Device::cuda());
  ops::cuda::matmul(a, false, b, true, d);
  EXPECT_LT(relative_error(d, reference_matmul(a, false, b, true, m, k, n, 1.0f, 0.0f, {})), kBf16Tolerance);
}

// Every algorithm the heuristic ranks for a problem computes it (ops/cuda/gemm_candidates.h): the LM head runs
// others than the first. A shape whose K is long beside M and N, as the LM head's d(hidden) has, where
// split-K algorithms are offered, with beta 1 into a BF16 D as its d(weight) has.
TEST_F(GemmGpu, EveryRankedCandidateMatchesCpu) {
  SCOPED_TRACE(seed());
  const int64_t m = 128, k = 4096, n = 256;
  const Tensor a = random_normal({m, k}, DType::BF16, Device::cuda(), rng());
  const Tensor b = random_normal({k, n}, DType::BF16, Device::cuda(), rng());
  const Tensor d0 = random_normal({m, n}, DType::BF16, Device::cuda(), rng());
  const Tensor expected = reference_matmul(a, false, b, false, m, k, n, 1.0f, 1.0f, to_cpu_f32(d0));
  const std::vector<ops::cuda::GemmCandidate> candidates = ops::cuda::matmul_candidates(a, false, b, false, d0, 8);
  ASSERT_FALSE(candidates.empty());
  for (size_t i = 0; i < candidates.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "candidate " << i << ": " << candidates[i].description);
    const Tensor d = Tensor::empty({m, n}, DType::BF16, Device::cuda());
    gpu::check(cudaMemcpyAsync(d.raw_data(), d0.raw_data(), d0.nbytes(), cudaMemcpyDeviceToDevice, gpu::stream()), "copy");
    ops::cuda::matmul_candidate(int(i), a, false, b, false, d, 1.0f, 1.0f);
    EXPECT_LT(relative_error(d, expected), kBf16Tolerance);
  }
  EXPECT_THROW(ops::cuda::matmul_candidate(int(candidates.size()) + 1000, a, false, b, false, d0), Error);
  // The tuned matmul (the fastest candidate, timed in place at the problem's first beta-0 call): right when it
  // is met first adding (beta 1: no timing, the heuristic's first), and when met first writing, then adding.
  for (const bool write_first : {false, true}) {
    SCOPED_TRACE(write_first ? "tuned, met first writing" : "tuned, met first adding");
    // Each round's output starts at its own alignment (256 bytes, then 16), which is part of the plan's key, so
    // each round meets its problem for the first time.
    const Tensor held = Tensor::empty({m * n + 8}, DType::BF16, Device::cuda());
    const Tensor view = held.narrow(write_first ? 8 : 0, m * n).view({m, n});
    if (write_first) {
      ops::cuda::matmul_tuned(a, false, b, false, view, 1.0f, 0.0f);
      EXPECT_LT(relative_error(view, reference_matmul(a, false, b, false, m, k, n, 1.0f, 0.0f, to_cpu_f32(d0))),
                kBf16Tolerance);
    }
    gpu::check(cudaMemcpyAsync(view.raw_data(), d0.raw_data(), d0.nbytes(), cudaMemcpyDeviceToDevice, gpu::stream()), "copy");
    ops::cuda::matmul_tuned(a, false, b, false, view, 1.0f, 1.0f);
    EXPECT_LT(relative_error(view, expected), kBf16Tolerance);
  }
  // K split in parts, where the first algorithm allows it (a refusal is an Error, never a wrong result).
  for (const int parts : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "K in " << parts << " parts");
    const Tensor d = Tensor::empty({m, n}, DType::BF16, Device::cuda());
    gpu::check(cudaMemcpyAsync(d.raw_data(), d0.raw_data(), d0.nbytes(), cudaMemcpyDeviceToDevice, gpu::stream()), "copy");
    try {
      ops::cuda::matmul_candidate(0, a, false, b, false, d, 1.0f, 1.0f, parts);
    } catch (const Error& e) {
      std::printf("split-K %d refused: %s\n", parts, e.what());
      continue;
    }
    EXPECT_LT(relative_error(d, expected), kBf16Tolerance);
  }
}

// Views that start at an offset only 4-byte aligned (rows 3.. of a matrix with 70 bf16 columns), as a weight
// view into a fused parameter or a chunk of rows can: the plan must not assume cuBLASLt's default 256 bytes.
TEST_F(GemmGpu, MisalignedViewsMatchCpu) {
  SCOPED_TRACE(seed());
  const int64_t m = 37, k = 70, n = 53;
  const Tensor a_storage = random_normal({m + 3, k}, DType::BF16, Device::cuda(), rng());
  const Tensor b_storage = random_normal({n + 1, k}, DType::BF16, Device::cuda(), rng());
  const Tensor d_storage = poisoned({m + 1, n}, DType::F32, Device::cuda());
  const Tensor a = a_storage.narrow(3, m), b = b_storage.narrow(1, n), d = d_storage.narrow(1, m);
  ops::cuda::matmul(a, false, b, true, d);
  EXPECT_LT(relative_error(d, reference_matmul(a, false, b, true, m, k, n, 1.0f, 0.0f, {})), kF32OutputTolerance);
}

TEST_F(GemmGpu, TrailingDimensionsFoldIntoColumns) {
  SCOPED_TRACE(seed());
  const int64_t m = 37, k = 70, n = 53;
  const Tensor a = random_normal({m, 5, 14}, DType::BF16, Device::cuda(), rng());  // [m, k] as [m, 5, 14]
  const Tensor b = random_normal({n, k}, DType::BF16, Device::cuda(), rng());
  const Tensor d = poisoned({m, n}, DType::BF16, Device::cuda());
  ops::cuda::matmul(a, false, b, true, d);
  EXPECT_LT(relative_error(d, reference_matmul(a, false, b, true, m, k, n, 1.0f, 0.0f, {})), kBf16Tolerance);
}

TEST_F(GemmGpu, EmptyProblems) {
  SCOPED_TRACE(seed());
  // M = 0: nothing to write.
  ops::cuda::matmul(Tensor::empty({0, 70}, DType::BF16, Device::cuda()), false,
                    random_normal({70, 53}, DType::BF16, Device::cuda(), rng()), false,
                    Tensor::empty({0, 53}, DType::F32, Device::cuda()));
  // K = 0: an empty sum, so D = beta · D.
  const Tensor a = Tensor::empty({37, 0}, DType::BF16, Device::cuda());
  const Tensor b = Tensor::empty({0, 53}, DType::BF16, Device::cuda());
  const Tensor kept = random_normal({37, 53}, DType::BF16, Device::cuda(), rng());
  const Tensor before = to_cpu_f32(kept);
  ops::cuda::matmul(a, false, b, false, kept, 1.0f, 1.0f);
  EXPECT_EQ(relative_error(kept, before), 0.0);
  const Tensor zeroed = poisoned({37, 53}, DType::F32, Device::cuda());
  ops::cuda::matmul(a, false, b, false, zeroed);
  EXPECT_EQ(relative_error(zeroed, Tensor::zeros({37, 53}, DType::F32)), 0.0);
}

TEST_F(GemmGpu, RejectsMismatchedShapesAndTypes) {
  const Tensor a = Tensor::empty({4, 8}, DType::BF16, Device::cuda());
  const Tensor b = Tensor::empty({9, 5}, DType::BF16, Device::cuda());
  EXPECT_THROW(ops::cuda::matmul(a, false, b, false, Tensor::empty({4, 5}, DType::BF16, Device::cuda())), Error);
  const Tensor a_f32 = Tensor::empty({4, 9}, DType::F32, Device::cuda());
  EXPECT_THROW(ops::cuda::matmul(a_f32, false, b, false, Tensor::empty({4, 5}, DType::BF16, Device::cuda())), Error);
  EXPECT_THROW(ops::cuda::matmul(Tensor::empty({4, 9}, DType::BF16), false, b, false,
                                 Tensor::empty({4, 5}, DType::BF16, Device::cuda())),
               Error);  // a on the CPU
}

// D = op(A)·op(B) + C with C apart from D (the residual sublayers' output projections): C read, left as it was,
// D written; C at a 16-byte offset (below D's 256) sets the plan's alignment; K = 0 copies C; C = D refused.
TEST_F(GemmGpu, MatmulAddReadsCAndWritesD) {
  SCOPED_TRACE(seed());
  const int64_t m = 37, k = 70, n = 56;
  for (bool transpose_a : {false, true})
    for (const int64_t c_offset : {int64_t(0), int64_t(8)}) {
      SCOPED_TRACE(::testing::Message() << "transpose_a " << transpose_a << " C offset " << c_offset);
      const Tensor a = random_normal(transpose_a ? Shape{k, m} : Shape{m, k}, DType::BF16, Device::cuda(), rng());
      const Tensor b = random_normal({n, k}, DType::BF16, Device::cuda(), rng());
      const Tensor held = random_normal({m * n + 8}, DType::BF16, Device::cuda(), rng());
      const Tensor c = held.narrow(c_offset, m * n).view({m, n});
      const Tensor c_before = to_cpu_f32(c);
      const Tensor d = poisoned({m, n}, DType::BF16, Device::cuda());
      ops::cuda::matmul_add(a, transpose_a, b, true, c, d);
      EXPECT_LT(relative_error(d, reference_matmul(a, transpose_a, b, true, m, k, n, 1.0f, 1.0f, c_before)),
                kBf16Tolerance);
      EXPECT_EQ(relative_error(c, c_before), 0.0);
    }
  const Tensor c = random_normal({4, 8}, DType::BF16, Device::cuda(), rng());
  const Tensor d = poisoned({4, 8}, DType::BF16, Device::cuda());
  ops::cuda::matmul_add(Tensor::empty({4, 0}, DType::BF16, Device::cuda()), false,
                        Tensor::empty({0, 8}, DType::BF16, Device::cuda()), false, c, d);
  EXPECT_EQ(relative_error(d, to_cpu_f32(c)), 0.0);
  const Tensor a = random_normal({4, 16}, DType::BF16, Device::cuda(), rng());
  const Tensor b = random_normal({16, 8}, DType::BF16, Device::cuda(), rng());
  EXPECT_THROW(ops::cuda::matmul_add(a, false, b, false, c, c), Error);
  EXPECT_THROW(ops::cuda::matmul_add(a, false, b, false, Tensor::empty({4, 8}, DType::F32, Device::cuda()), d), Error);
}

// y = residual + x·Wᵀ (+ bias), with and without a bias (the two paths: one GEMM, or a GEMM and an add).
TEST_F(LinearGpu, ForwardResidualMatchesCpu) {
  SCOPED_TRACE(seed());
  const int64_t rows = 37, in = 70, out = 56;
  for (bool with_bias : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "bias " << with_bias);
    const Tensor x = random_normal({rows, in}, DType::BF16, Device::cuda(), rng());
    const Tensor weight = random_normal({out, in}, DType::BF16, Device::cuda(), rng(), 0.1f);
    const Tensor bias = with_bias ? random_normal({out}, DType::BF16, Device::cuda(), rng()) : Tensor();
    const Tensor residual = random_normal({rows, out}, DType::BF16, Device::cuda(), rng());
    const Tensor y = poisoned({rows, out}, DType::BF16, Device::cuda());
    ops::cuda::linear_forward_residual(x, weight, bias, residual, y);
    Tensor expected = ops::linear_forward(to_cpu_f32(x), to_cpu_f32(weight), with_bias ? to_cpu_f32(bias) : Tensor());
    const Tensor r = to_cpu_f32(residual);
    for (int64_t i = 0; i < expected.numel(); ++i) expected.data<float>()[i] += r.data<float>()[i];
    // Two bf16 roundings on the bias path (the GEMM's output, then the sum): twice the one-rounding tolerance.
    EXPECT_LT(relative_error(y, expected), 2 * kBf16Tolerance);
  }
}

TEST_F(LinearGpu, ForwardMatchesCpuWithAndWithoutBias) {
  SCOPED_TRACE(seed());
  const int64_t rows = 37, in = 70, out = 53;
  for (DType y_type : {DType::BF16, DType::F32})
    for (bool with_bias : {false, true})
      for (DType bias_type : {DType::BF16, DType::F32}) {
        if (!with_bias && bias_type == DType::F32) continue;
        SCOPED_TRACE(::testing::Message() << "y " << dtype_name(y_type) << " bias " << with_bias << " "
                                          << dtype_name(bias_type));
        const Tensor x = random_normal({rows, in}, DType::BF16, Device::cuda(), rng());
        const Tensor weight = random_normal({out, in}, DType::BF16, Device::cuda(), rng(), 0.1f);
        const Tensor bias = with_bias ? random_normal({out}, bias_type, Device::cuda(), rng()) : Tensor();
        const Tensor y = poisoned({rows, out}, y_type, Device::cuda());
        ops::cuda::linear_forward(x, weight, bias, y);
        const Tensor expected =
            ops::linear_forward(to_cpu_f32(x), to_cpu_f32(weight), with_bias ? to_cpu_f32(bias) : Tensor());
        // An F32 bias is rounded to bf16 on its way through a BF16 y; an F32 y is exact up to summation order.
        EXPECT_LT(relative_error(y, expected), tolerance_for(y_type));
      }
}

TEST_F(LinearGpu, BackwardMatchesCpu) {
  SCOPED_TRACE(seed());
  const int64_t rows = 37, in = 70, out = 53;
  for (DType grad_type : {DType::BF16, DType::F32})
    for (bool accumulate_dx : {false, true})
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "grads " << dtype_name(grad_type) << " accumulate_dx " << accumulate_dx
                                          << " bias " << with_bias);
        const Tensor x = random_normal({rows, in}, DType::BF16, Device::cuda(), rng());
        const Tensor weight = random_normal({out, in}, DType::BF16, Device::cuda(), rng(), 0.1f);
        const Tensor dy = random_normal({rows, out}, DType::BF16, Device::cuda(), rng());
        // dweight and dbias accumulate, so they start from values rather than poison; so does dx when it adds.
        const Tensor dx = accumulate_dx ? random_normal({rows, in}, DType::BF16, Device::cuda(), rng())
                                        : poisoned({rows, in}, DType::BF16, Device::cuda());
        const Tensor dweight = random_normal({out, in}, grad_type, Device::cuda(), rng());
        const Tensor dbias = with_bias ? random_normal({out}, grad_type, Device::cuda(), rng()) : Tensor();
        const Tensor dx_before = to_cpu_f32(dx);
        const Tensor expected_dweight = to_cpu_f32(dweight);
        const Tensor expected_dbias = with_bias ? to_cpu_f32(dbias) : Tensor();

        ops::cuda::linear_backward(dy, x, weight, dx, dweight, dbias, accumulate_dx);
        Tensor expected_dx =
            ops::linear_backward(to_cpu_f32(dy), to_cpu_f32(x), to_cpu_f32(weight), expected_dweight, expected_dbias);
        if (accumulate_dx)
          for (int64_t i = 0; i < expected_dx.numel(); ++i) expected_dx.data<float>()[i] += dx_before.data<float>()[i];

        EXPECT_LT(relative_error(dx, expected_dx), kBf16Tolerance);
        EXPECT_LT(relative_error(dweight, expected_dweight), tolerance_for(grad_type));
        if (with_bias) {
          EXPECT_LT(relative_error(dbias, expected_dbias), tolerance_for(grad_type));
        }
      }
}

TEST_F(LinearGpu, BackwardWithoutDxStillGivesWeightGradient) {
  SCOPED_TRACE(seed());
  const int64_t rows = 45, in = 64, out = 96;
  const Tensor x = random_normal({rows, in}, DType::BF16, Device::cuda(), rng());
  const Tensor weight = random_normal({out, in}, DType::BF16, Device::cuda(), rng(), 0.1f);
  const Tensor dy = random_normal({rows, out}, DType::BF16, Device::cuda(), rng());
  const Tensor dweight = Tensor::zeros({out, in}, DType::F32, Device::cuda());
  ops::cuda::linear_backward(dy, x, weight, Tensor(), dweight);
  const Tensor expected_dweight = Tensor::zeros({out, in}, DType::F32);
  ops::linear_backward(to_cpu_f32(dy), to_cpu_f32(x), to_cpu_f32(weight), expected_dweight);
  EXPECT_LT(relative_error(dweight, expected_dweight), kF32OutputTolerance);
}

// A weight view into a fused parameter ([gate; up] stacked along dim 0), as the model's blocks pass it.
TEST_F(LinearGpu, WeightViewIntoFusedParameter) {
  SCOPED_TRACE(seed());
  const int64_t rows = 37, in = 70, out = 53;
  const Tensor fused = random_normal({2 * out, in}, DType::BF16, Device::cuda(), rng(), 0.1f);
  const Tensor weight = fused.narrow(out, out);
  const Tensor x = random_normal({rows, in}, DType::BF16, Device::cuda(), rng());
  const Tensor y = poisoned({rows, out}, DType::F32, Device::cuda());
  ops::cuda::linear_forward(x, weight, Tensor(), y);
  EXPECT_LT(relative_error(y, ops::linear_forward(to_cpu_f32(x), to_cpu_f32(weight))), kF32OutputTolerance);

  const Tensor fused_grad = Tensor::zeros({2 * out, in}, DType::F32, Device::cuda());
  const Tensor dy = random_normal({rows, out}, DType::BF16, Device::cuda(), rng());
  const Tensor dx = poisoned({rows, in}, DType::BF16, Device::cuda());
  ops::cuda::linear_backward(dy, x, weight, dx, fused_grad.narrow(out, out));
  const Tensor expected_grad = Tensor::zeros({2 * out, in}, DType::F32);
  const Tensor expected_dx = ops::linear_backward(to_cpu_f32(dy), to_cpu_f32(x), to_cpu_f32(weight),
                                                  expected_grad.narrow(out, out));
  EXPECT_LT(relative_error(dx, expected_dx), kBf16Tolerance);
  EXPECT_LT(relative_error(fused_grad, expected_grad), kF32OutputTolerance);  // the other half stays zero
}

TEST_F(LinearGpu, ZeroRowsLeaveGradientsUnchanged) {
  SCOPED_TRACE(seed());
  const int64_t in = 70, out = 53;
  const Tensor x = Tensor::empty({0, in}, DType::BF16, Device::cuda());
  const Tensor weight = random_normal({out, in}, DType::BF16, Device::cuda(), rng());
  const Tensor bias = random_normal({out}, DType::BF16, Device::cuda(), rng());
  ops::cuda::linear_forward(x, weight, bias, Tensor::empty({0, out}, DType::BF16, Device::cuda()));

  const Tensor dweight = random_normal({out, in}, DType::BF16, Device::cuda(), rng());
  const Tensor dbias = random_normal({out}, DType::F32, Device::cuda(), rng());
  const Tensor dweight_before = to_cpu_f32(dweight), dbias_before = to_cpu_f32(dbias);
  ops::cuda::linear_backward(Tensor::empty({0, out}, DType::BF16, Device::cuda()), x, weight,
                             Tensor::empty({0, in}, DType::BF16, Device::cuda()), dweight, dbias);
  EXPECT_EQ(relative_error(dweight, dweight_before), 0.0);
  EXPECT_EQ(relative_error(dbias, dbias_before), 0.0);
}

}  // namespace
}  // namespace moetune
