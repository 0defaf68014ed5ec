// Device helpers shared by the row and pointwise kernels (norm, qkv_rope, activation, embedding, elementwise):
// conversion of the two storage types to and from fp32, packed loads/stores, warp and block sums. Device code
// only; included by .cu files, never by host code.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace moetune::ops::cuda::pointwise {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }

// kVec consecutive elements moved as one load/store (two for 32 bytes of f32); the caller guarantees the
// alignment, min(16, kVec·sizeof(T)) bytes, which is why every launcher checks its pointers before picking kVec.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec < 16 ? sizeof(T) * kVec : 16) Pack {
  T v[kVec];
};

template <int kVec, typename T>
__device__ __forceinline__ void load(const T* p, float (&out)[kVec]) {
  const Pack<T, kVec> pack = *reinterpret_cast<const Pack<T, kVec>*>(p);
#pragma unroll
  for (int k = 0; k < kVec; ++k) out[k] = to_float(pack.v[k]);
}

template <int kVec, typename T>
__device__ __forceinline__ void store(T* p, const float (&in)[kVec]) {
  Pack<T, kVec> pack;
#pragma unroll
  for (int k = 0; k < kVec; ++k) pack.v[k] = from_float<T>(in[k]);
  *reinterpret_cast<Pack<T, kVec>*>(p) = pack;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sums each of the N values over the whole block; every thread gets the totals, in the same fixed order (so
// the result is deterministic). blockDim.x must be a multiple of 32 and at most 1024; every thread must call.
template <int N>
__device__ __forceinline__ void block_sum(float (&v)[N]) {
  __shared__ float warp_totals[N][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = warp_sum(v[n]);
  __syncthreads();  // a previous call's readers may still be reading warp_totals
  if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) warp_totals[n][warp] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = warp_sum(lane < warps ? warp_totals[n][lane] : 0.0f);
}

// Threads per block for a row of `width` elements handled kVec at a time: enough warps to cover the row once,
// between one warp and max_threads.
inline int row_block_threads(int64_t width, int vec, int max_threads = 512) {
  const int64_t vectors = (width + vec - 1) / vec;
  const int64_t warps = (vectors + 31) / 32;
  const int64_t threads = warps * 32;
  return int(threads < 32 ? 32 : (threads > max_threads ? max_threads : threads));
}

}  // namespace moetune::ops::cuda::pointwise
