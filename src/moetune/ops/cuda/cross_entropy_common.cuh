// What the two cross-entropy kernels (cross_entropy.cu: one block a row; cross_entropy_cluster.cu: a cluster of
// blocks a row, held in shared memory) share: packs of bf16 logits, the online-softmax partial (max, Σ exp) and
// its merge across a block, and the gradient of one pack. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "moetune/ops/cuda/cross_entropy_kernels.h"

namespace moetune::ops::cuda {

constexpr int32_t kCrossEntropyIgnoreIndex = -100;

// kWidth bf16 logits read or written as one access: 16 bytes for kWidth 8.
template <int kWidth>
struct alignas(2 * kWidth) Pack {
  __nv_bfloat16 v[kWidth];
};

constexpr float kLog2e = 1.4426950408889634f;

// 2^x by the SFU alone (ex2.approx: ~2 ulp, flushing subnormal results to zero), where expf adds a range
// reduction of several instructions per value: at one read and one write per row the kernels are close to
// issue-bound at the H200's bandwidth (~10 instructions per logit), so every instruction per value counts.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A partial softmax normaliser: Σ exp(x − max) over the values seen so far.
struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};  // both empty: exp(-inf - -inf) would be NaN
  return {m, a.sum * exp2_approx((a.max - m) * kLog2e) + b.sum * exp2_approx((b.max - m) * kLog2e)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = merge(value, {__shfl_xor_sync(0xffffffffu, value.max, offset), __shfl_xor_sync(0xffffffffu, value.sum, offset)});
  return value;
}

template <int kThreads>
__device__ MaxSum block_merge(MaxSum value) {
  constexpr int kWarps = kThreads / 32;
  __shared__ MaxSum warp_partials[kWarps];
  __shared__ MaxSum result;
  value = warp_merge(value);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_partials[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = warp_merge(lane < kWarps ? warp_partials[lane] : MaxSum{-INFINITY, 0.0f});
    if (lane == 0) result = value;
  }
  __syncthreads();
  return result;
}

// Adds a pack to a thread's running partial: one rescale of the sum to the new max per pack, then one
// exponential per value (9 per 8 values, where merging a pack's own partial would take 10).
template <int kWidth>
__device__ __forceinline__ void accumulate(MaxSum& partial, const Pack<kWidth>& pack) {
  float values[kWidth];
  float m = partial.max;
  for (int i = 0; i < kWidth; ++i) {
    values[i] = __bfloat162float(pack.v[i]);
    m = fmaxf(m, values[i]);
  }
  if (m == -INFINITY) return;  // nothing but -inf so far
  const float shift = -m * kLog2e;
  float sum = partial.sum * exp2_approx(fmaf(partial.max, kLog2e, shift));  // 0 while the partial is empty
  for (int i = 0; i < kWidth; ++i) sum += exp2_approx(fmaf(values[i], kLog2e, shift));
  partial = {m, sum};
}

// grad_scale · (softmax − onehot(target)) for the kWidth logits starting at column `first`.
template <int kWidth>
__device__ __forceinline__ Pack<kWidth> pack_gradient(const Pack<kWidth>& pack, int64_t first, int32_t target,
                                                      float log_sum_exp, float grad_scale) {
  const float shift = -log_sum_exp * kLog2e;
  float grads[kWidth];
  for (int i = 0; i < kWidth; ++i) grads[i] = grad_scale * exp2_approx(fmaf(__bfloat162float(pack.v[i]), kLog2e, shift));
  const int64_t hit = int64_t(target) - first;
  if (hit >= 0 && hit < kWidth)  // one pack a row: the compare stays out of the per-value work
    for (int i = 0; i < kWidth; ++i)
      if (i == hit) grads[i] -= grad_scale;
  Pack<kWidth> out;
  if constexpr (kWidth % 2 == 0) {
    for (int i = 0; i < kWidth; i += 2) {
      const __nv_bfloat162 two = __floats2bfloat162_rn(grads[i], grads[i + 1]);
      out.v[i] = two.x;
      out.v[i + 1] = two.y;
    }
  } else {
    for (int i = 0; i < kWidth; ++i) out.v[i] = __float2bfloat16_rn(grads[i]);
  }
  return out;
}

template <int kWidth>
__device__ __forceinline__ Pack<kWidth> zero_pack() {
  Pack<kWidth> zeros;
  for (int i = 0; i < kWidth; ++i) zeros.v[i] = __float2bfloat16_rn(0.0f);
  return zeros;
}

// A target the row is not scored against: the ignore index, or one outside [0, vocab) (a bad label, whose loss
// is NaN so that it poisons the sum instead of passing unnoticed).
__device__ __forceinline__ bool unscored(int32_t target, int64_t vocab) {
  return target == kCrossEntropyIgnoreIndex || target < 0 || int64_t(target) >= vocab;
}
__device__ __forceinline__ float unscored_loss(int32_t target) {
  return target == kCrossEntropyIgnoreIndex ? 0.0f : NAN;
}

// The cluster kernel's launch (cross_entropy_cluster.cu), behind launch_cross_entropy_rows: packed when the
// rows are 16-byte aligned multiples of 8 values. cudaErrorNotSupported when a slice of the row does not fit in
// one block's shared memory (the caller then runs one block per row); cudaErrorInvalidValue for a cluster size or
// block width it has no kernel for.
cudaError_t launch_cross_entropy_cluster_rows(void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                              float grad_scale, bool write_grad, float* row_losses,
                                              cudaStream_t stream, CrossEntropyLaunch how, bool packed);

}  // namespace moetune::ops::cuda
