// Cross-entropy over rows of bf16 logits. Rows whose slices fit in shared memory go to a cluster of blocks per
// row (cross_entropy_cluster.cu: the row read once); otherwise, or when asked, one block per row runs here: an
// online softmax pass (each thread keeps a running max and a sum of exponentials relative to it, merged across
// the block) gives logsumexp in fp32, and a second pass re-reads the row and turns it into its gradient in place,
// so the caller never holds a separate d(logits). Rows are read as 16-byte packs of 8 bf16 when the vocabulary
// allows it (151936 does), one value at a time otherwise (odd vocabularies).
#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/cross_entropy_common.cuh"
#include "moetune/ops/cuda/cross_entropy_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr int kThreads = 512;

// One block per row. The gradient pass walks each thread's packs backwards, re-reading first what the statistics
// pass read last, which L2 is likeliest to still hold (1-3% faster on the H200 at 151936 and 163840 columns;
// bounding the rows in flight or 1024 threads a block gained nothing, docs/benchmarks.md).
template <int kWidth>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(__nv_bfloat16* __restrict__ logits, const int32_t* __restrict__ targets, int64_t vocab,
                              float grad_scale, bool write_grad, float* __restrict__ row_losses) {
  gpu::wait_for_previous_kernel();
  const int64_t row = blockIdx.x;
  Pack<kWidth>* packs = reinterpret_cast<Pack<kWidth>*>(logits + row * vocab);
  const int64_t pack_count = vocab / kWidth;
  const int32_t target = targets[row];

  if (unscored(target, vocab)) {
    if (threadIdx.x == 0) row_losses[row] = unscored_loss(target);
    if (write_grad)
      for (int64_t p = threadIdx.x; p < pack_count; p += kThreads) packs[p] = zero_pack<kWidth>();
    return;  // uniform across the block: no thread reaches the barriers below
  }
  // Read before the block barrier in block_merge, after which the row may be overwritten.
  const float target_logit = threadIdx.x == 0 ? __bfloat162float(logits[row * vocab + target]) : 0.0f;

  MaxSum partial{-INFINITY, 0.0f};
  int64_t p = threadIdx.x;
  for (; p + 3 * kThreads < pack_count; p += 4 * kThreads) {  // four loads in flight per thread
    Pack<kWidth> loaded[4];
    for (int u = 0; u < 4; ++u) loaded[u] = packs[p + u * kThreads];
    for (int u = 0; u < 4; ++u) accumulate(partial, loaded[u]);
  }
  for (; p < pack_count; p += kThreads) accumulate(partial, packs[p]);
  const MaxSum total = block_merge<kThreads>(partial);
  const float log_sum_exp = total.max + logf(total.sum);
  if (threadIdx.x == 0) row_losses[row] = log_sum_exp - target_logit;
  if (!write_grad) return;

  const int64_t mine = pack_count > int64_t(threadIdx.x) ? (pack_count - 1 - threadIdx.x) / kThreads + 1 : 0;
  for (int64_t j = mine - 1; j >= 0; --j) {
    const int64_t q = threadIdx.x + j * kThreads;
    packs[q] = pack_gradient(packs[q], q * kWidth, target, log_sum_exp, grad_scale);
  }
}

__global__ void __launch_bounds__(1024) sum_into_kernel(const float* __restrict__ values, int64_t n, float* total) {
  gpu::wait_for_previous_kernel();
  __shared__ double partials[1024];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += 1024) sum += double(values[i]);
  partials[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = 512; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partials[threadIdx.x] += partials[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *total = float(double(*total) + partials[0]);
}

}  // namespace

cudaError_t launch_cross_entropy_rows(void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                      float grad_scale, bool write_grad, float* row_losses, cudaStream_t stream,
                                      CrossEntropyLaunch how) {
  if (rows == 0) return cudaSuccess;
  if (vocab <= 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  const bool packed = vocab % 8 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  if (how.cluster_blocks > 1) {
    const cudaError_t status = launch_cross_entropy_cluster_rows(logits, targets, rows, vocab, grad_scale, write_grad,
                                                                 row_losses, stream, how, packed);
    if (status != cudaErrorNotSupported) return status;  // else the row does not fit: one block per row below
  }
  auto* bf16_logits = static_cast<__nv_bfloat16*>(logits);
  if (packed)
    gpu::launch_dependent(cross_entropy_rows_kernel<8>, unsigned(rows), kThreads, 0, stream, bf16_logits, targets,
                          vocab, grad_scale, write_grad, row_losses);
  else
    gpu::launch_dependent(cross_entropy_rows_kernel<1>, unsigned(rows), kThreads, 0, stream, bf16_logits, targets,
                          vocab, grad_scale, write_grad, row_losses);
  return cudaGetLastError();
}

cudaError_t launch_sum_into(const float* values, int64_t n, float* total, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  gpu::launch_dependent(sum_into_kernel, 1, 1024, 0, stream, values, n, total);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
