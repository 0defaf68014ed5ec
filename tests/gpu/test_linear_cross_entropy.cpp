// The fused LM head + cross-entropy (ops/cuda/linear_cross_entropy.h) against ops::linear and
// ops::cross_entropy(_backward) on the CPU. The reference rounds the logits and d(logits) to bf16 where the
// GPU holds them in bf16 (as HF does), so what remains is accumulation order.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/linear_cross_entropy.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/loss.h"

namespace moetune {
namespace {

using testing::kBf16Tolerance;
using testing::poisoned;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

// The loss is fp32 statistics over bf16 logits on both sides; only rare one-ulp differences in a logit's
// bf16 rounding (different summation order before it) and fp32 vs double remain.
constexpr double kLossTolerance = 1e-3;

Tensor round_to_bf16(const Tensor& f32) { return to_cpu_f32(ops::cast(f32, DType::BF16)); }

Tensor device_scalar(float value) { return Tensor::from_vector<float>({value}, {1}).to(Device::cuda()); }

struct Problem {
  int64_t rows, width, vocab;
  double ignored_fraction;
};

struct Inputs {
  Tensor hidden, weight, targets;     // on the GPU
  std::vector<int64_t> target_list;  // the same targets for the CPU reference
};

Inputs make_inputs(const Problem& p, std::mt19937& rng) {
  Inputs in;
  in.hidden = random_normal({p.rows, p.width}, DType::BF16, Device::cuda(), rng);
  // Logits of order one, as a trained head gives; larger ones only sharpen the softmax.
  in.weight = random_normal({p.vocab, p.width}, DType::BF16, Device::cuda(), rng, 1.0f / std::sqrt(float(p.width)));
  std::uniform_int_distribution<int64_t> token(0, p.vocab - 1);
  std::bernoulli_distribution ignored(p.ignored_fraction);
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < p.rows; ++r) {
    in.target_list.push_back(ignored(rng) ? ops::kIgnoreIndex : token(rng));
    ids.push_back(int32_t(in.target_list.back()));
  }
  in.targets = Tensor::from_vector<int32_t>(ids, {p.rows}).to(Device::cuda());
  return in;
}

struct Expected {
  double loss_sum;
  Tensor dhidden, dweight;
};

// dweight_start: the dweight values before the call (gradients accumulate).
Expected reference(const Inputs& in, double grad_scale, double loss_start, const Tensor& dweight_start) {
  const Tensor hidden = to_cpu_f32(in.hidden), weight = to_cpu_f32(in.weight);
  const Tensor logits = round_to_bf16(ops::linear_forward(hidden, weight));
  Expected e;
  e.loss_sum = loss_start + ops::cross_entropy(logits, in.target_list).loss_sum;
  const Tensor dlogits = round_to_bf16(ops::cross_entropy_backward(logits, in.target_list, grad_scale));
  e.dweight = to_cpu_f32(dweight_start);
  e.dhidden = ops::linear_backward(dlogits, hidden, weight, e.dweight);
  return e;
}

class LinearCrossEntropyGpu : public testing::GpuTest {
 protected:
  // Runs forward + backward and checks the loss and both gradients.
  void check(const Problem& p, int64_t chunk_rows, double grad_scale, DType dweight_type) {
    SCOPED_TRACE(::testing::Message() << "rows " << p.rows << " width " << p.width << " vocab " << p.vocab
                                      << " chunk " << chunk_rows << " scale " << grad_scale << " dweight "
                                      << dtype_name(dweight_type));
    const Inputs in = make_inputs(p, rng());
    const float loss_start = 0.5f;
    const Tensor loss_sum = device_scalar(loss_start);
    const Tensor dhidden = poisoned({p.rows, p.width}, DType::BF16, Device::cuda());
    const Tensor dweight = random_normal({p.vocab, p.width}, dweight_type, Device::cuda(), rng(), 0.01f);
    const Expected e = reference(in, grad_scale, loss_start, dweight);

    ops::cuda::linear_cross_entropy(in.hidden, in.weight, in.targets, grad_scale, loss_sum, dhidden, dweight, chunk_rows);

    EXPECT_LT(relative_error(loss_sum, Tensor::from_vector<float>({float(e.loss_sum)}, {1})), kLossTolerance);
    EXPECT_LT(relative_error(dhidden, e.dhidden), kBf16Tolerance);
    EXPECT_LT(relative_error(dweight, e.dweight), kBf16Tolerance);
  }
};

TEST_F(LinearCrossEntropyGpu, SeveralChunksWithRaggedLastMatchCpu) {
  SCOPED_TRACE(seed());
  // 100 rows in chunks of 32: 32 + 32 + 32 + 4. Vocabulary 1000 takes the 8-wide packed path.
  check({.rows = 100, .width = 64, .vocab = 1000, .ignored_fraction = 0.2}, 32, 0.37, DType::F32);
  check({.rows = 100, .width = 64, .vocab = 1000, .ignored_fraction = 0.2}, 32, 1.0, DType::BF16);
}

TEST_F(LinearCrossEntropyGpu, OddVocabularyAndWidthMatchCpu) {
  SCOPED_TRACE(seed());
  // Vocabulary 37 takes the one-value-at-a-time path; 45 rows in chunks of 16: 16 + 16 + 13.
  check({.rows = 45, .width = 70, .vocab = 37, .ignored_fraction = 0.2}, 16, 0.37, DType::F32);
  check({.rows = 45, .width = 70, .vocab = 37, .ignored_fraction = 0.2}, 16, 2.5, DType::BF16);
}

TEST_F(LinearCrossEntropyGpu, DefaultChunkMatchesCpu) {
  SCOPED_TRACE(seed());
  check({.rows = 77, .width = 64, .vocab = 1000, .ignored_fraction = 0.1}, 0, 1.0 / 77, DType::F32);
}

TEST_F(LinearCrossEntropyGpu, VocabularyWiderThanOneBlockPassMatchesCpu) {
  SCOPED_TRACE(seed());
  // More packs per row than threads per block (512 · 8 = 4096 values), with a ragged last pass.
  check({.rows = 9, .width = 32, .vocab = 10008, .ignored_fraction = 0.0}, 4, 1.0, DType::F32);
}

TEST_F(LinearCrossEntropyGpu, ForwardOnlyAddsTheLoss) {
  SCOPED_TRACE(seed());
  const Problem p{.rows = 50, .width = 64, .vocab = 1000, .ignored_fraction = 0.2};
  const Inputs in = make_inputs(p, rng());
  const Tensor loss_sum = device_scalar(1.25f);
  ops::cuda::linear_cross_entropy(in.hidden, in.weight, in.targets, 1.0, loss_sum, {}, {}, 16);
  const Expected e = reference(in, 1.0, 1.25, Tensor::zeros({p.vocab, p.width}, DType::F32));
  EXPECT_LT(relative_error(loss_sum, Tensor::from_vector<float>({float(e.loss_sum)}, {1})), kLossTolerance);
}

TEST_F(LinearCrossEntropyGpu, AllRowsIgnoredGiveZeroLossAndGradients) {
  SCOPED_TRACE(seed());
  const Problem p{.rows = 40, .width = 64, .vocab = 1000, .ignored_fraction = 1.0};
  const Inputs in = make_inputs(p, rng());
  const Tensor loss_sum = device_scalar(0.5f);
  const Tensor dhidden = poisoned({p.rows, p.width}, DType::BF16, Device::cuda());
  const Tensor dweight = random_normal({p.vocab, p.width}, DType::BF16, Device::cuda(), rng());
  const Tensor dweight_before = to_cpu_f32(dweight);
  ops::cuda::linear_cross_entropy(in.hidden, in.weight, in.targets, 0.37, loss_sum, dhidden, dweight, 16);
  EXPECT_EQ(to_cpu_f32(loss_sum).data<float>()[0], 0.5f);
  EXPECT_EQ(relative_error(dhidden, Tensor::zeros({p.rows, p.width}, DType::F32)), 0.0);
  EXPECT_EQ(relative_error(dweight, dweight_before), 0.0);
}

TEST_F(LinearCrossEntropyGpu, ZeroRowsDoNothing) {
  SCOPED_TRACE(seed());
  const Tensor weight = random_normal({37, 64}, DType::BF16, Device::cuda(), rng());
  const Tensor dweight = random_normal({37, 64}, DType::F32, Device::cuda(), rng());
  const Tensor dweight_before = to_cpu_f32(dweight);
  const Tensor loss_sum = device_scalar(0.5f);
  ops::cuda::linear_cross_entropy(Tensor::empty({0, 64}, DType::BF16, Device::cuda()), weight,
                                  Tensor::empty({0}, DType::I32, Device::cuda()), 1.0, loss_sum,
                                  Tensor::empty({0, 64}, DType::BF16, Device::cuda()), dweight);
  EXPECT_EQ(to_cpu_f32(loss_sum).data<float>()[0], 0.5f);
  EXPECT_EQ(relative_error(dweight, dweight_before), 0.0);
}

TEST_F(LinearCrossEntropyGpu, TargetOutsideVocabularyMakesTheLossNaN) {
  SCOPED_TRACE(seed());
  const Tensor hidden = random_normal({3, 64}, DType::BF16, Device::cuda(), rng());
  const Tensor weight = random_normal({37, 64}, DType::BF16, Device::cuda(), rng());
  const Tensor targets = Tensor::from_vector<int32_t>({1, 37, 2}, {3}).to(Device::cuda());
  const Tensor loss_sum = device_scalar(0.0f);
  ops::cuda::linear_cross_entropy(hidden, weight, targets, 1.0, loss_sum);
  EXPECT_TRUE(std::isnan(to_cpu_f32(loss_sum).data<float>()[0]));
}

TEST_F(LinearCrossEntropyGpu, RejectsBadArguments) {
  const Tensor hidden = Tensor::empty({3, 64}, DType::BF16, Device::cuda());
  const Tensor weight = Tensor::empty({37, 64}, DType::BF16, Device::cuda());
  const Tensor loss_sum = Tensor::zeros({1}, DType::F32, Device::cuda());
  EXPECT_THROW(ops::cuda::linear_cross_entropy(hidden, weight, Tensor::zeros({3}, DType::I64, Device::cuda()), 1.0,
                                               loss_sum),
               Error);  // targets must be I32
  EXPECT_THROW(ops::cuda::linear_cross_entropy(hidden, Tensor::empty({37, 65}, DType::BF16, Device::cuda()),
                                               Tensor::zeros({3}, DType::I32, Device::cuda()), 1.0, loss_sum),
               Error);  // widths differ
  EXPECT_THROW(ops::cuda::linear_cross_entropy(hidden, weight, Tensor::zeros({3}, DType::I32, Device::cuda()), 1.0,
                                               loss_sum, Tensor::empty({3, 63}, DType::BF16, Device::cuda())),
               Error);  // dhidden shape
}

// The memory plan's numbers need no GPU: chunking of the real Qwen3 head (vocabulary 151936, 8192 rows).
TEST(LinearCrossEntropyGpuPlan, ChunkAndWorkspaceSizes) {
  const int64_t chunk = ops::cuda::linear_cross_entropy_chunk_rows(8192, 151936);
  EXPECT_EQ(chunk, 2048);  // 2208 rows fit in 640 MiB, rounded down to a power of two
  EXPECT_EQ(ops::cuda::linear_cross_entropy_workspace_bytes(8192, 151936),
            size_t(2048) * 151936 * 2 + size_t(8192) * 4);
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(8192, 163840), 2048);   // Moonlight: 2048 fit exactly
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(8192, 131072), 2048);   // Nemotron-H: 2560 fit
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(8192, 129280), 2048);   // DeepSeek-V3: 2595 fit
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(8192, 700000), 256);    // 479 fit
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(8192, 2000000), 128);   // 167 fit
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(8192, 5000000), 67);    // 67 fit: as they are below 128
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(100, 1000, 32), 32);
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(10, 1000, 0), 10);
  EXPECT_EQ(ops::cuda::linear_cross_entropy_chunk_rows(0, 1000, 0), 0);
  EXPECT_EQ(ops::cuda::linear_cross_entropy_workspace_bytes(0, 1000), 0u);
}


// Not a check: the LM head + loss (forward and backward) timed per chunk height at Moonlight's shape (8192
// tokens, hidden 2048, vocabulary 163840), to choose the chunk budget. Run with --gtest_also_run_disabled_tests.
TEST_F(LinearCrossEntropyGpu, DISABLED_TimesChunkHeights) {
  std::mt19937 rng(7);
  const Problem p{8192, 2048, 163840, 0.0};
  const Inputs in = make_inputs(p, rng);
  const Tensor loss = Tensor::zeros({1}, DType::F32, Device::cuda());
  const Tensor dhidden = Tensor::empty({p.rows, p.width}, DType::BF16, Device::cuda());
  const Tensor dweight = Tensor::zeros({p.vocab, p.width}, DType::BF16, Device::cuda());
  for (const int64_t chunk : {0, 512, 1024, 2048, 4096, 8192}) {
    for (int i = 0; i < 2; ++i) ops::cuda::linear_cross_entropy(in.hidden, in.weight, in.targets, 1e-4, loss, dhidden, dweight, chunk);
    gpu::synchronize();
    const int repeats = 5;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i)
      ops::cuda::linear_cross_entropy(in.hidden, in.weight, in.targets, 1e-4, loss, dhidden, dweight, chunk);
    gpu::synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / repeats;
    const double flops = 6.0 * double(p.rows) * double(p.width) * double(p.vocab);
    std::printf("lm head chunk %lld rows (asked %lld): %.2f ms, %.0f TFLOP/s\n",
                (long long)ops::cuda::linear_cross_entropy_chunk_rows(p.rows, p.vocab, chunk), (long long)chunk, ms,
                flops / ms / 1e9);
  }
}

}  // namespace
}  // namespace moetune
