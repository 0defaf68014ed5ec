// Cross-entropy over rows of bf16 logits, one block per row: an online softmax pass (each thread keeps a
// running max and a sum of exponentials relative to it, merged across the block) gives logsumexp in fp32, and
// a second pass turns the row into its gradient in place, so the caller never holds a separate d(logits).
// Rows are read as 16-byte packs of 8 bf16 when the vocabulary allows it (151936 does), one value at a time
// otherwise (odd vocabularies).
#include <cuda_bf16.h>

#include <cmath>

#include "moetune/ops/cuda/cross_entropy_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int32_t kIgnoreIndex = -100;

template <int kWidth>
struct alignas(2 * kWidth) Pack {
  __nv_bfloat16 v[kWidth];
};

// A partial softmax normaliser: Σ exp(x − max) over the values seen so far.
struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};  // both empty: exp(-inf - -inf) would be NaN
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// Every thread gets the merge of all threads' partials.
__device__ MaxSum block_merge(MaxSum value) {
  __shared__ MaxSum warp_partials[kWarps];
  __shared__ MaxSum result;
  for (int offset = 16; offset > 0; offset /= 2)
    value = merge(value, {__shfl_xor_sync(0xffffffffu, value.max, offset), __shfl_xor_sync(0xffffffffu, value.sum, offset)});
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_partials[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < kWarps ? warp_partials[lane] : MaxSum{-INFINITY, 0.0f};
    for (int offset = 16; offset > 0; offset /= 2)
      value = merge(value, {__shfl_xor_sync(0xffffffffu, value.max, offset), __shfl_xor_sync(0xffffffffu, value.sum, offset)});
    if (lane == 0) result = value;
  }
  __syncthreads();
  return result;
}

template <int kWidth>
__device__ __forceinline__ MaxSum pack_max_sum(const Pack<kWidth>& pack) {
  float values[kWidth];
  float pack_max = -INFINITY;
  for (int i = 0; i < kWidth; ++i) {
    values[i] = __bfloat162float(pack.v[i]);
    pack_max = fmaxf(pack_max, values[i]);
  }
  MaxSum pack_sum{pack_max, 0.0f};
  if (pack_max != -INFINITY)
    for (int i = 0; i < kWidth; ++i) pack_sum.sum += expf(values[i] - pack_max);
  return pack_sum;
}

// One block per row. The gradient pass walks each thread's packs backwards, re-reading first what the statistics
// pass read last, which L2 is likeliest to still hold (1-3% faster on the H200 at 151936 and 163840 columns;
// bounding the rows in flight or 1024 threads a block gained nothing, docs/benchmarks.md).
template <int kWidth>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(__nv_bfloat16* __restrict__ logits, const int32_t* __restrict__ targets, int64_t vocab,
                              float grad_scale, bool write_grad, float* __restrict__ row_losses) {
  const int64_t row = blockIdx.x;
  Pack<kWidth>* packs = reinterpret_cast<Pack<kWidth>*>(logits + row * vocab);
  const int64_t pack_count = vocab / kWidth;
  const int32_t target = targets[row];

  if (target == kIgnoreIndex || target < 0 || int64_t(target) >= vocab) {
    if (threadIdx.x == 0) row_losses[row] = target == kIgnoreIndex ? 0.0f : NAN;
    if (write_grad) {
      Pack<kWidth> zeros;
      for (int i = 0; i < kWidth; ++i) zeros.v[i] = __float2bfloat16_rn(0.0f);
      for (int64_t p = threadIdx.x; p < pack_count; p += kThreads) packs[p] = zeros;
    }
    return;  // uniform across the block: no thread reaches the barriers below
  }
  // Read before the block barrier in block_merge, after which the row may be overwritten.
  const float target_logit = threadIdx.x == 0 ? __bfloat162float(logits[row * vocab + target]) : 0.0f;

  MaxSum partial{-INFINITY, 0.0f};
  int64_t p = threadIdx.x;
  for (; p + 3 * kThreads < pack_count; p += 4 * kThreads) {  // four loads in flight per thread
    Pack<kWidth> loaded[4];
    for (int u = 0; u < 4; ++u) loaded[u] = packs[p + u * kThreads];
    for (int u = 0; u < 4; ++u) partial = merge(partial, pack_max_sum(loaded[u]));
  }
  for (; p < pack_count; p += kThreads) partial = merge(partial, pack_max_sum(packs[p]));
  const MaxSum total = block_merge(partial);
  const float log_sum_exp = total.max + logf(total.sum);
  if (threadIdx.x == 0) row_losses[row] = log_sum_exp - target_logit;
  if (!write_grad) return;

  const int64_t mine = pack_count > int64_t(threadIdx.x) ? (pack_count - 1 - threadIdx.x) / kThreads + 1 : 0;
  for (int64_t j = mine - 1; j >= 0; --j) {
    const int64_t q = threadIdx.x + j * kThreads;
    Pack<kWidth> pack = packs[q];
    for (int i = 0; i < kWidth; ++i) {
      float grad = grad_scale * expf(__bfloat162float(pack.v[i]) - log_sum_exp);
      if (q * kWidth + i == target) grad -= grad_scale;
      pack.v[i] = __float2bfloat16_rn(grad);
    }
    packs[q] = pack;
  }
}

__global__ void __launch_bounds__(1024) sum_into_kernel(const float* __restrict__ values, int64_t n, float* total) {
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
                                      float grad_scale, bool write_grad, float* row_losses, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (vocab <= 0 || rows > 0x7fffffff) return cudaErrorInvalidValue;
  auto* bf16_logits = static_cast<__nv_bfloat16*>(logits);
  const bool packed = vocab % 8 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  if (packed)
    cross_entropy_rows_kernel<8><<<unsigned(rows), kThreads, 0, stream>>>(bf16_logits, targets, vocab, grad_scale,
                                                                          write_grad, row_losses);
  else
    cross_entropy_rows_kernel<1><<<unsigned(rows), kThreads, 0, stream>>>(bf16_logits, targets, vocab, grad_scale,
                                                                          write_grad, row_losses);
  return cudaGetLastError();
}

cudaError_t launch_sum_into(const float* values, int64_t n, float* total, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  sum_into_kernel<<<1, 1024, 0, stream>>>(values, n, total);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
