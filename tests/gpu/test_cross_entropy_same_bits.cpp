// The cross-entropy kernels that replace or may replace the held kernel (ops/cuda/cross_entropy_cluster.cu with
// its threads loading the slice, the default until session 12) against it: the held kernel with its slice loaded
// by one bulk copy (CrossEntropyLaunch::bulk_load) and the streamed kernel (cross_entropy_streamed.cu: persistent
// clusters copying the next rows' slices into shared memory while they write the current one). The same loss and
// gradient bits at the benchmark vocabularies, a vocabulary whose packs do not divide into the cluster's slices,
// one too small for every block to hold a value, rows ignored (-100) and out of range among the scored ones, and
// more rows than the device holds clusters (so that each streamed cluster loops over many rows and its buffers
// wrap). The streamed kernel is called directly, so a silent fallback to the held kernel cannot pass for it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/cross_entropy_kernels.h"
#include "moetune/ops/loss.h"

namespace moetune {
namespace {

using ops::cuda::CrossEntropyLaunch;
using testing::poisoned;
using testing::random_normal;

// How many elements of two same-sized CPU tensors differ in their bytes (element size `element_bytes`).
int64_t differing_elements(const Tensor& a, const Tensor& b, size_t element_bytes) {
  const auto* x = static_cast<const unsigned char*>(a.raw_data());
  const auto* y = static_cast<const unsigned char*>(b.raw_data());
  if (std::memcmp(x, y, a.nbytes()) == 0) return 0;
  int64_t differing = 0;
  for (size_t i = 0; i < a.nbytes(); i += element_bytes) differing += std::memcmp(x + i, y + i, element_bytes) != 0;
  return differing;
}

class CrossEntropySameBitsGpu : public testing::GpuTest {
 protected:
  // Targets: -100 for every `ignore_every`-th row and the last `ignored_tail` rows, `vocab` (out of range) for row
  // `bad` (none when -1), else random.
  void check(int64_t rows, int64_t vocab, int64_t ignore_every, int64_t ignored_tail, int64_t bad) {
    std::uniform_int_distribution<int32_t> token(0, int32_t(vocab - 1));
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < rows; ++r) {
      int32_t id = token(rng());
      if ((ignore_every > 0 && r % ignore_every == ignore_every - 1) || r >= rows - ignored_tail)
        id = int32_t(ops::kIgnoreIndex);
      if (r == bad) id = int32_t(vocab);
      ids.push_back(id);
    }
    const Tensor targets = Tensor::from_vector<int32_t>(ids, {rows}).to(Device::cuda());
    const auto* target_ids = static_cast<const int32_t*>(targets.raw_data());
    const Tensor logits = random_normal({rows, vocab}, DType::BF16, Device::cuda(), rng(), 3.0f);

    for (const bool write_grad : {true, false})
      for (const int cluster_blocks : {4, 8})
        for (const int threads : {256, 512}) {
          // The reference: the held kernel loading by its threads, at the same cluster size and block width.
          const Tensor held = logits.clone();
          const Tensor held_losses = poisoned({rows}, DType::F32, Device::cuda());
          gpu::check(ops::cuda::launch_cross_entropy_rows(held.raw_data(), target_ids, rows, vocab, 0.37f, write_grad,
                                                          static_cast<float*>(held_losses.raw_data()), gpu::stream(),
                                                          {cluster_blocks, threads, 1, false}),
                     "held cross-entropy");
          const Tensor expected = held.to(Device::cpu()), expected_losses = held_losses.to(Device::cpu());
          for (const bool early_copy : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "rows " << rows << " vocab " << vocab << " cluster " << cluster_blocks
                                              << " x " << threads << " bulk load" << (early_copy ? ", early" : "")
                                              << (write_grad ? "" : " loss only"));
            const Tensor work = logits.clone();
            const Tensor losses = poisoned({rows}, DType::F32, Device::cuda());
            gpu::check(ops::cuda::launch_cross_entropy_rows(work.raw_data(), target_ids, rows, vocab, 0.37f, write_grad,
                                                            static_cast<float*>(losses.raw_data()), gpu::stream(),
                                                            {cluster_blocks, threads, 1, true, early_copy}),
                       "held cross-entropy, bulk load");
            EXPECT_EQ(differing_elements(losses.to(Device::cpu()), expected_losses, 4), 0);
            EXPECT_EQ(differing_elements(work.to(Device::cpu()), expected, 2), 0);
          }
          for (const int stages : {2, 3, 4}) {
            SCOPED_TRACE(::testing::Message() << "rows " << rows << " vocab " << vocab << " cluster " << cluster_blocks
                                              << " x " << threads << " stages " << stages
                                              << (write_grad ? "" : " loss only"));
            const Tensor work = logits.clone();
            const Tensor losses = poisoned({rows}, DType::F32, Device::cuda());
            const cudaError_t status = ops::cuda::launch_cross_entropy_streamed_rows(
                work.raw_data(), target_ids, rows, vocab, 0.37f, write_grad, static_cast<float*>(losses.raw_data()),
                gpu::stream(), {cluster_blocks, threads, stages});
            // Four stages of a quarter of a wide row do not fit one block's shared memory: the only refusal allowed.
            if (status == cudaErrorNotSupported && (cluster_blocks == 4 || stages == 4) && vocab > 100000) continue;
            ASSERT_EQ(status, cudaSuccess) << cudaGetErrorString(status);
            gpu::check(cudaStreamSynchronize(gpu::stream()), "streamed cross-entropy");
            EXPECT_EQ(differing_elements(losses.to(Device::cpu()), expected_losses, 4), 0);
            EXPECT_EQ(differing_elements(work.to(Device::cpu()), expected, 2), 0);
          }
        }
  }
};

TEST_F(CrossEntropySameBitsGpu, BenchmarkVocabulariesGiveTheHeldKernelsBits) {
  SCOPED_TRACE(seed());
  // 300 rows: several rows a cluster (~33 clusters of 8 fit at 163840), a run of ignored rows at the end.
  check(300, 163840, 7, 20, 5);  // Moonlight: slices of 2560 packs (40 KB)
  check(70, 151936, 5, 0, -1);   // Qwen3: 18992 packs, slices of 2374
}

TEST_F(CrossEntropySameBitsGpu, SlicesThatDoNotDivideTheRowGiveTheHeldKernelsBits) {
  SCOPED_TRACE(seed());
  check(1000, 8008, 3, 7, 999);  // 1001 packs: slices of 126 (the last 119) in 8, 251 (the last 248) in 4
  check(9, 24, 4, 0, 0);         // 3 packs: the trailing blocks of the cluster hold nothing and copy nothing
}

TEST_F(CrossEntropySameBitsGpu, AllRowsIgnoredGiveTheHeldKernelsBits) {
  SCOPED_TRACE(seed());
  check(40, 163840, 1, 0, -1);  // no row is read: only zeros written, no cluster barrier but the last
}

TEST_F(CrossEntropySameBitsGpu, RefusesRowsItCannotCopy) {
  const Tensor logits = Tensor::zeros({2, 1001}, DType::BF16, Device::cuda());
  const Tensor targets = Tensor::zeros({2}, DType::I32, Device::cuda());
  const Tensor losses = Tensor::empty({2}, DType::F32, Device::cuda());
  EXPECT_EQ(ops::cuda::launch_cross_entropy_streamed_rows(logits.raw_data(), static_cast<const int32_t*>(targets.raw_data()),
                                                          2, 1001, 1.0f, true, static_cast<float*>(losses.raw_data()),
                                                          gpu::stream(), {8, 512, 2}),
            cudaErrorInvalidValue);  // 1001 values a row: not whole 16-byte packs
  EXPECT_EQ(ops::cuda::launch_cross_entropy_streamed_rows(logits.raw_data(), static_cast<const int32_t*>(targets.raw_data()),
                                                          2, 1000, 1.0f, true, static_cast<float*>(losses.raw_data()),
                                                          gpu::stream(), {8, 512, 1}),
            cudaErrorInvalidValue);  // one stage is the held kernel's
}

}  // namespace
}  // namespace moetune
