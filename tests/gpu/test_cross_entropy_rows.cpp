// The cross-entropy kernels behind the LM head (ops/cuda/cross_entropy_kernels.h) on their own, every launch
// shape (one block per row; clusters of 2, 4, 8 blocks of 256 or 512 threads) against the CPU reference
// (ops::cross_entropy_backward, losses in double), then timed (DISABLED_) at the benchmark jobs' chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_tiled_random.h"
#include "gpu_timing.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/cross_entropy_kernels.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/loss.h"

namespace moetune {
namespace {

using ops::cuda::CrossEntropyLaunch;
using testing::kBf16Tolerance;
using testing::poisoned;
using testing::random_normal;
using testing::relative_error;
using testing::to_cpu_f32;

const std::vector<CrossEntropyLaunch> kLaunches = {{1, 512}, {2, 256}, {2, 512}, {4, 256},
                                                   {4, 512}, {8, 256}, {8, 512}};

std::string describe(const CrossEntropyLaunch& how) {
  return how.cluster_blocks == 1 ? "one block a row"
                                 : "cluster " + std::to_string(how.cluster_blocks) + " x " + std::to_string(how.threads);
}

// -log softmax(row)[target] in double.
double row_loss(const float* row, int64_t vocab, int64_t target) {
  double max = -INFINITY, sum = 0;
  for (int64_t v = 0; v < vocab; ++v) max = std::max(max, double(row[v]));
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - max);
  return max + std::log(sum) - double(row[target]);
}

class CrossEntropyRowsGpu : public testing::GpuTest {
 protected:
  // Runs the kernel on fresh logits under every launch shape and checks each row's loss and the gradient written
  // in place. Targets: -100 for the ignored rows, `vocab` (out of range) for the bad ones, else random.
  // masked_columns: the first that many columns of every row are -inf (a vocabulary mask), so whole slices and
  // threads hold nothing but -inf.
  void check(int64_t rows, int64_t vocab, const std::vector<int64_t>& ignored, const std::vector<int64_t>& bad,
             bool write_grad = true, int64_t masked_columns = 0) {
    std::uniform_int_distribution<int64_t> token(masked_columns, vocab - 1);
    std::vector<int64_t> targets;
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < rows; ++r) {
      targets.push_back(token(rng()));
      if (std::find(ignored.begin(), ignored.end(), r) != ignored.end()) targets.back() = ops::kIgnoreIndex;
      if (std::find(bad.begin(), bad.end(), r) != bad.end()) targets.back() = vocab;
      ids.push_back(int32_t(targets.back()));
    }
    const Tensor target_ids = Tensor::from_vector<int32_t>(ids, {rows}).to(Device::cuda());
    // Logits spread enough (σ 3) that the softmax is far from uniform.
    Tensor logits = random_normal({rows, vocab}, DType::BF16, Device::cuda(), rng(), 3.0f);
    Tensor host_logits = to_cpu_f32(logits);
    if (masked_columns > 0) {
      for (int64_t r = 0; r < rows; ++r) std::fill_n(host_logits.data<float>() + r * vocab, masked_columns, -INFINITY);
      logits = ops::cast(host_logits, DType::BF16).to(Device::cuda());
    }
    const float grad_scale = 0.37f;

    // The reference: bad rows scored as ignored by the CPU (which rejects them) and checked separately.
    std::vector<int64_t> scored = targets;
    for (auto& t : scored)
      if (t == vocab) t = ops::kIgnoreIndex;
    const Tensor expected_grad =
        to_cpu_f32(ops::cast(ops::cross_entropy_backward(host_logits, scored, grad_scale), DType::BF16));

    for (const CrossEntropyLaunch& how : kLaunches) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " vocab " << vocab << " " << describe(how)
                                        << (write_grad ? "" : " loss only"));
      const Tensor work = logits.clone();
      const Tensor losses = poisoned({rows}, DType::F32, Device::cuda());
      gpu::check(ops::cuda::launch_cross_entropy_rows(work.raw_data(), static_cast<const int32_t*>(target_ids.raw_data()),
                                                      rows, vocab, grad_scale, write_grad,
                                                      static_cast<float*>(losses.raw_data()), gpu::stream(), how),
                 "cross-entropy");
      const Tensor got = to_cpu_f32(losses);
      for (int64_t r = 0; r < rows; ++r) {
        const float loss = got.data<float>()[r];
        if (targets[r] == vocab)
          EXPECT_TRUE(std::isnan(loss)) << "row " << r;
        else if (targets[r] == ops::kIgnoreIndex)
          EXPECT_EQ(loss, 0.0f) << "row " << r;
        else
          EXPECT_NEAR(loss, row_loss(host_logits.data<float>() + r * vocab, vocab, targets[r]), 1e-3) << "row " << r;
      }
      if (write_grad)
        EXPECT_LT(relative_error(work, expected_grad), kBf16Tolerance);
      else
        EXPECT_EQ(relative_error(work, host_logits), 0.0);  // untouched
    }
  }
};

TEST_F(CrossEntropyRowsGpu, BenchmarkVocabulariesMatchCpu) {
  SCOPED_TRACE(seed());
  check(3, 151936, {1}, {});  // Qwen3: 18992 packs, a slice of 2374 packs (38 KB) per block in a cluster of 8
  check(2, 163840, {}, {});   // Moonlight
}

TEST_F(CrossEntropyRowsGpu, VocabularyNotAMultipleOfTheVectorMatchesCpu) {
  SCOPED_TRACE(seed());
  check(5, 1001, {0}, {3});  // one value at a time, slices of 501, 251 and 126 values
  check(4, 3, {2}, {});      // fewer values than blocks in a cluster: the trailing blocks hold nothing
}

TEST_F(CrossEntropyRowsGpu, OneRowMatchesCpu) {
  SCOPED_TRACE(seed());
  check(1, 4096, {}, {});
  check(1, 8, {}, {});
}

TEST_F(CrossEntropyRowsGpu, IgnoredAndBadRowsGiveZeroGradients) {
  SCOPED_TRACE(seed());
  check(4, 151936, {0, 1, 2, 3}, {});  // all ignored
  check(3, 1000, {}, {0, 1, 2});       // all out of range: NaN losses, zero gradients
}

TEST_F(CrossEntropyRowsGpu, MaskedColumnsMatchCpu) {
  SCOPED_TRACE(seed());
  // Moonlight's rows with their first 100000 columns -inf: in a cluster of 8 the first three blocks and most of the
  // fourth hold nothing else, so their partials are (-inf, 0) and must merge to the others' logsumexp.
  check(3, 163840, {1}, {}, true, 100000);
  check(2, 4096, {}, {}, true, 4000);
}

TEST_F(CrossEntropyRowsGpu, RowTooWideForTheClusterFallsBackToOneBlockARow) {
  SCOPED_TRACE(seed());
  // 600000 bf16 per row: 600 KB in a cluster of 2 does not fit two blocks' shared memory (227 KB each); 8 do.
  check(2, 600000, {}, {});
}

TEST_F(CrossEntropyRowsGpu, LossOnlyLeavesTheLogits) {
  SCOPED_TRACE(seed());
  check(3, 151936, {2}, {}, false);
}

// Not a check: the kernel alone on one chunk of the LM head (2048 rows, the op's default at both benchmark
// vocabularies since session 10; 768 before), per launch shape in two rounds (the H200's clock drifts under its
// power cap: a shape that wins in both rounds wins), against a device-to-device copy of the same bytes (one read, one write: what
// a kernel that holds the row on chip must move), with no ignored rows and with a quarter of them ignored (write
// only). GB/s are of the bytes that must move (scored rows read and written once, ignored rows written); the
// one-block kernel reads scored rows twice. Then the op's chunk loop (logits GEMM, cross-entropy, d(hidden),
// d(weight)) over 8192 rows per launch shape, where the cross-entropy reads logits the GEMM just wrote. The loop's
// shapes run one after another for seconds of GEMMs each, and in two calls its times moved by ±2 ms with run
// order (24-29 ms where the profiled phase is ~22 ms): read its lines as rough, not as a ranking of the shapes.
// Run with --gtest_also_run_disabled_tests; every line starts with "ce ".
TEST_F(CrossEntropyRowsGpu, DISABLED_TimesTheChunkPerLaunchShape) {
  std::mt19937 rng(7);
  constexpr int64_t kChunk = 2048, kTokens = 8192, kWidth = 2048;
  for (const int64_t vocab : {151936, 163840}) {
    const double row_bytes = double(vocab) * 2;
    const Tensor logits = testing::tiled_random(kChunk, vocab, rng, 3.0f);
    const Tensor copy = Tensor::empty({kChunk, vocab}, DType::BF16, Device::cuda());
    const Tensor losses = Tensor::empty({kChunk}, DType::F32, Device::cuda());
    const double copy_ms = testing::mean_gpu_ms([&] {
      gpu::check(cudaMemcpyAsync(copy.raw_data(), logits.raw_data(), logits.nbytes(), cudaMemcpyDeviceToDevice,
                                 gpu::stream()),
                 "copy");
    }, 3, 50);
    std::printf("ce vocab %lld chunk %lld: copy of %.0f MB %.3f ms = %.0f GB/s (read + write)\n", (long long)vocab,
                (long long)kChunk, kChunk * row_bytes / 1e6, copy_ms, 2 * kChunk * row_bytes / copy_ms / 1e6);
    for (const double ignored_fraction : {0.0, 0.25}) {
      std::vector<int32_t> ids(static_cast<size_t>(kChunk));
      std::uniform_int_distribution<int32_t> token(0, int32_t(vocab - 1));
      std::bernoulli_distribution ignored(ignored_fraction);
      int64_t scored = 0;
      for (auto& id : ids) {
        id = ignored(rng) ? int32_t(ops::kIgnoreIndex) : token(rng);
        scored += id >= 0;
      }
      const Tensor targets = Tensor::from_vector<int32_t>(ids, {kChunk}).to(Device::cuda());
      const double needed = (2.0 * double(scored) + double(kChunk - scored)) * row_bytes;
      for (int round = 1; round <= 2; ++round)
        for (const CrossEntropyLaunch& how : kLaunches) {
          // In place, as the op runs it: from the second run on the kernel reads gradients, which costs the same.
          const double ms = testing::mean_gpu_ms([&] {
            gpu::check(ops::cuda::launch_cross_entropy_rows(logits.raw_data(), static_cast<const int32_t*>(targets.raw_data()),
                                                            kChunk, vocab, 1e-4f, true,
                                                            static_cast<float*>(losses.raw_data()), gpu::stream(), how),
                       "cross-entropy");
          }, 3, 50);
          std::printf("ce round %d vocab %lld chunk %lld ignored %.2f %-20s %.3f ms = %.0f GB/s of needed bytes (%.2f x "
                      "copy); x %.2f chunks a step: %.2f ms\n",
                      round, (long long)vocab, (long long)kChunk, ignored_fraction, describe(how).c_str(), ms,
                      needed / ms / 1e6, ms / copy_ms, double(kTokens) / kChunk, ms * double(kTokens) / kChunk);
        }
    }

    // The op's loop with each launch shape (ops/cuda/linear_cross_entropy.cpp's order and algorithms).
    const Tensor hidden = testing::tiled_random(kTokens, kWidth, rng, 1.0f);
    const Tensor weight = testing::tiled_random(vocab, kWidth, rng, 1.0f / 45.25f);
    const Tensor dhidden = Tensor::empty({kTokens, kWidth}, DType::BF16, Device::cuda());
    const Tensor dweight = Tensor::zeros({vocab, kWidth}, DType::BF16, Device::cuda());
    const Tensor all_losses = Tensor::empty({kTokens}, DType::F32, Device::cuda());
    std::vector<int32_t> ids(static_cast<size_t>(kTokens));
    std::uniform_int_distribution<int32_t> token(0, int32_t(vocab - 1));
    for (auto& id : ids) id = token(rng);
    const Tensor targets = Tensor::from_vector<int32_t>(ids, {kTokens}).to(Device::cuda());
    for (const CrossEntropyLaunch& how : {CrossEntropyLaunch{1, 512}, CrossEntropyLaunch{4, 512},
                                          CrossEntropyLaunch{8, 256}, CrossEntropyLaunch{8, 512}}) {
      const double ms = testing::mean_gpu_ms([&] {
        for (int64_t start = 0; start < kTokens; start += kChunk) {
          const int64_t length = std::min(kChunk, kTokens - start);
          const Tensor x = hidden.narrow(start, length), l = logits.narrow(0, length);
          ops::cuda::matmul(x, false, weight, true, l);
          gpu::check(ops::cuda::launch_cross_entropy_rows(l.raw_data(), static_cast<const int32_t*>(targets.raw_data()) + start,
                                                          length, vocab, 1e-4f, true,
                                                          static_cast<float*>(all_losses.raw_data()) + start,
                                                          gpu::stream(), how),
                     "cross-entropy");
          ops::cuda::matmul(l, false, weight, false, dhidden.narrow(start, length));
          ops::cuda::matmul(l, true, x, false, dweight, 1.0f, 1.0f);
        }
      }, 2, 10);
      std::printf("ce vocab %lld lm head loop over %lld tokens %-20s %.2f ms\n", (long long)vocab, (long long)kTokens,
                  describe(how).c_str(), ms);
    }

    // The same loop with two logits buffers, chunk i's cross-entropy on a second, higher-priority stream while
    // chunk i-1's d(weight) GEMM runs: what overlapping the memory-bound pass with the GEMMs would gain (one more
    // chunk of logits held).
    const Tensor other_logits = Tensor::empty({kChunk, vocab}, DType::BF16, Device::cuda());
    int least = 0, greatest = 0;
    gpu::check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priorities");
    cudaStream_t side = nullptr;
    gpu::check(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, greatest), "side stream");
    cudaEvent_t logits_ready, grad_ready;
    gpu::check(cudaEventCreateWithFlags(&logits_ready, cudaEventDisableTiming), "event");
    gpu::check(cudaEventCreateWithFlags(&grad_ready, cudaEventDisableTiming), "event");
    for (const CrossEntropyLaunch& how : {CrossEntropyLaunch{1, 512}, CrossEntropyLaunch{}}) {
      const double ms = testing::mean_gpu_ms([&] {
        const Tensor buffers[2] = {logits, other_logits};
        for (int64_t start = 0, i = 0; start < kTokens; start += kChunk, ++i) {
          const int64_t length = std::min(kChunk, kTokens - start);
          const Tensor x = hidden.narrow(start, length), l = buffers[i % 2].narrow(0, length);
          ops::cuda::matmul(x, false, weight, true, l);
          gpu::check(cudaEventRecord(logits_ready, gpu::stream()), "record");
          gpu::check(cudaStreamWaitEvent(side, logits_ready), "wait");
          gpu::check(ops::cuda::launch_cross_entropy_rows(l.raw_data(), static_cast<const int32_t*>(targets.raw_data()) + start,
                                                          length, vocab, 1e-4f, true,
                                                          static_cast<float*>(all_losses.raw_data()) + start, side, how),
                     "cross-entropy");
          gpu::check(cudaEventRecord(grad_ready, side), "record");
          if (start > 0) {  // the previous chunk's d(weight) beside this chunk's cross-entropy
            const int64_t previous = start - kChunk;
            ops::cuda::matmul(buffers[(i + 1) % 2].narrow(0, kChunk), true, hidden.narrow(previous, kChunk), false,
                              dweight, 1.0f, 1.0f);
          }
          gpu::check(cudaStreamWaitEvent(gpu::stream(), grad_ready), "wait");
          ops::cuda::matmul(l, false, weight, false, dhidden.narrow(start, length));
          if (start + length == kTokens)
            ops::cuda::matmul(l, true, x, false, dweight, 1.0f, 1.0f);
        }
      }, 2, 10);
      std::printf("ce vocab %lld lm head loop over %lld tokens, cross-entropy overlapped with d(weight) %-20s %.2f ms\n",
                  (long long)vocab, (long long)kTokens, describe(how).c_str(), ms);
    }
    cudaEventDestroy(logits_ready);
    cudaEventDestroy(grad_ready);
    cudaStreamDestroy(side);
  }
}

}  // namespace
}  // namespace moetune
