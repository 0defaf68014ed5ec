#include "moetune/ops/cuda/linear_cross_entropy.h"

#include <algorithm>
#include <limits>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/device.h"
#include "moetune/ops/cuda/cross_entropy_kernels.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/gemm_candidates.h"
#include "moetune/ops/lm_head_chunk.h"

namespace moetune::ops::cuda {
namespace {

void check_gpu_matrix(const Tensor& t, std::string_view role) {
  MOETUNE_CHECK(t.defined() && t.device().is_cuda() && t.dim() == 2,
                "linear_cross_entropy: {} {} must be a 2-D tensor on the GPU", role, t.defined() ? t.str() : "(undefined)");
}

}  // namespace

int64_t linear_cross_entropy_chunk_rows(int64_t rows, int64_t vocab, int64_t chunk_rows) {
  MOETUNE_CHECK(rows >= 0 && vocab > 0 && chunk_rows >= 0,
                "linear_cross_entropy: {} rows, vocabulary {}, chunk of {} rows", rows, vocab, chunk_rows);
  return lm_head_chunk_rows(rows, vocab, chunk_rows);
}

size_t linear_cross_entropy_workspace_bytes(int64_t rows, int64_t vocab, int64_t chunk_rows) {
  const int64_t chunk = linear_cross_entropy_chunk_rows(rows, vocab, chunk_rows);
  return size_t(chunk) * size_t(vocab) * dtype_size(DType::BF16) + size_t(rows) * sizeof(float);
}

void linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& targets, double grad_scale,
                          const Tensor& loss_sum, const Tensor& dhidden, const Tensor& dweight, int64_t chunk_rows,
                          bool write_dweight, float logit_scale) {
  check_gpu_matrix(hidden, "hidden");
  check_gpu_matrix(weight, "weight");
  const int64_t rows = hidden.size(0), width = hidden.size(1), vocab = weight.size(0);
  MOETUNE_CHECK(hidden.dtype() == DType::BF16 && weight.dtype() == DType::BF16 && weight.size(1) == width,
                "linear_cross_entropy: hidden {} and weight {} must be BF16 [T, H] and [V, H]", hidden.str(),
                weight.str());
  MOETUNE_CHECK(targets.defined() && targets.device().is_cuda() && targets.dtype() == DType::I32 &&
                    targets.dim() == 1 && targets.numel() == rows,
                "linear_cross_entropy: targets {} must be I32 [{}] on the GPU", targets.defined() ? targets.str() : "(undefined)",
                rows);
  MOETUNE_CHECK(loss_sum.defined() && loss_sum.device().is_cuda() && loss_sum.dtype() == DType::F32 &&
                    loss_sum.numel() == 1,
                "linear_cross_entropy: loss_sum {} must be F32 [1] on the GPU", loss_sum.defined() ? loss_sum.str() : "(undefined)");
  if (dhidden.defined()) {
    check_gpu_matrix(dhidden, "dhidden");
    MOETUNE_CHECK(dhidden.shape() == hidden.shape(), "linear_cross_entropy: dhidden {} for hidden {}", dhidden.str(),
                  hidden.str());
  }
  if (dweight.defined()) {
    check_gpu_matrix(dweight, "dweight");
    MOETUNE_CHECK(dweight.shape() == weight.shape(), "linear_cross_entropy: dweight {} for weight {}", dweight.str(),
                  weight.str());
  }
  const int64_t chunk = linear_cross_entropy_chunk_rows(rows, vocab, chunk_rows);
  if (rows == 0) {
    if (write_dweight && dweight.defined()) zero_bytes(dweight.raw_data(), dweight.device(), dweight.nbytes());
    return;
  }
  const bool backward = dhidden.defined() || dweight.defined();

  // Freed stream-ordered when these go out of scope, after the work queued on them.
  const Tensor logits = Tensor::empty({chunk, vocab}, DType::BF16, Device::cuda());
  const Tensor row_losses = Tensor::empty({rows}, DType::F32, Device::cuda());
  const auto* target_ids = static_cast<const int32_t*>(targets.raw_data());
  auto* losses = static_cast<float*>(row_losses.raw_data());
  // The three GEMMs of a full chunk run cuBLASLt's fastest ranked algorithm for their shape, timed at their first
  // call (matmul_tuned): which one wins changes with the vocabulary and the chunk's height (5-9% apart at
  // Moonlight's vocabulary and 2048 rows, on three different tiles; tests/gpu/test_lm_head_timing.cpp). A full
  // chunk's shape repeats from step to step however many tokens a step holds (the data's lengths set that); a
  // shorter one (the last, or a batch smaller than a chunk) may be new at every step, where timing 8 algorithms
  // (and the host's wait for it) would cost more than any of them saves: those run the heuristic's first.
  const int64_t full_chunk = linear_cross_entropy_chunk_rows(std::numeric_limits<int64_t>::max(), vocab, chunk_rows);

  for (int64_t start = 0; start < rows; start += chunk) {
    const int64_t length = std::min(chunk, rows - start);
    const Tensor hidden_rows = hidden.narrow(start, length);
    const Tensor chunk_logits = logits.narrow(0, length);
    const auto gemm = length == full_chunk ? matmul_tuned : matmul;
    gemm(hidden_rows, false, weight, true, chunk_logits, logit_scale, 0.0f);
    gpu::check(launch_cross_entropy_rows(chunk_logits.raw_data(), target_ids + start, length, vocab, float(grad_scale),
                                         backward, losses + start, gpu::stream()),
               "linear_cross_entropy: cross-entropy kernel");
    // chunk_logits now holds grad_scale · d(loss)/d(logits); the logits' scale carries on to the GEMMs' inputs. The two
    // gradients' GEMMs one after the other: d(hidden)'s 2048 x 2048 output is 128 tiles for 132 SMs, but d(W) on a
    // second stream (its own cuBLASLt handle and workspace) did not fill the 4 idle SMs: its persistent kernel ran 3.56
    // ms, from d(hidden)'s start (1.85 ms) to its own length after it, and Moonlight's step did not gain with every
    // layer's d(x) and d(W) paired the same way (112.6 / 114.4 k tokens/s against 114.7 / 114.1 k; session 23,
    // docs/benchmarks.md).
    if (dhidden.defined()) gemm(chunk_logits, false, weight, false, dhidden.narrow(start, length), logit_scale, 0.0f);
    if (dweight.defined()) {
      // The first chunk writes a gradient whose old contents are not wanted; every later one adds. Written, the
      // first chunk is where its algorithm is timed; a gradient that is only ever added to (tied embeddings,
      // later micro-batches first) keeps the heuristic's first.
      const float beta = write_dweight && start == 0 ? 0.0f : 1.0f;
      gemm(chunk_logits, true, hidden_rows, false, dweight, logit_scale, beta);
    }
  }
  gpu::check(launch_sum_into(losses, rows, static_cast<float*>(loss_sum.raw_data()), gpu::stream()),
             "linear_cross_entropy: loss sum");
}

}  // namespace moetune::ops::cuda
