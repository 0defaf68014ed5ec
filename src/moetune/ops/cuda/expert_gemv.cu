// One warp per output row: the lanes stride over the row in kVec-wide chunks (kVec = 8, 16-byte loads, when the
// row length and the pointers allow it, else 1), and a warp sum gives the dot product.
#include <cstdint>
#include <initializer_list>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/expert_gemv_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kWarpsPerBlock = 8;

template <int kVec>
__device__ __forceinline__ float warp_dot(const bf16* __restrict__ a, const bf16* __restrict__ b, int64_t n, int lane) {
  float sum = 0.0f;
  for (int64_t c = int64_t(lane) * kVec; c < n; c += 32 * kVec) {
    float x[kVec], y[kVec];
    load<kVec>(a + c, x);
    load<kVec>(b + c, y);
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum += x[i] * y[i];
  }
  return warp_sum(sum);
}

// As the GEMMs of the grouped path write their outputs.
__device__ __forceinline__ float round_bf16(float v) { return to_float(from_float<bf16>(v)); }

// kGated: SwiGLU over the gate row j and the up row inner + j; else relu² over row j.
template <int kVec, bool kGated>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    up_activation_kernel(const bf16* __restrict__ x, const bf16* __restrict__ up_weights,
                         const int32_t* __restrict__ expert_ids, bf16* __restrict__ activated, int64_t inner,
                         int64_t hidden) {
  gpu::wait_for_previous_kernel();
  const int lane = int(threadIdx.x) & 31;
  const int64_t j = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5), slot = blockIdx.y;
  if (j >= inner) return;
  constexpr int64_t kRows = kGated ? 2 : 1;  // first-projection rows per unit of inner
  const bf16* weights = up_weights + int64_t(expert_ids[slot]) * kRows * inner * hidden;
  float value;
  if constexpr (kGated) {
    const float gate = round_bf16(warp_dot<kVec>(weights + j * hidden, x, hidden, lane));
    const float up = round_bf16(warp_dot<kVec>(weights + (inner + j) * hidden, x, hidden, lane));
    value = gate / (1.0f + expf(-gate)) * up;
  } else {
    const float up = fmaxf(round_bf16(warp_dot<kVec>(weights + j * hidden, x, hidden, lane)), 0.0f);
    value = up * up;
  }
  if (lane == 0) activated[slot * inner + j] = from_float<bf16>(value);
}

// residual and out may be the same row: each element is read before the same lane writes it.
template <int kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    down_combine_kernel(const bf16* __restrict__ activated, const bf16* __restrict__ down,
                        const int32_t* __restrict__ expert_ids, const float* __restrict__ weights, const bf16* residual,
                        bf16* out, int top_k, int64_t inner, int64_t hidden) {
  gpu::wait_for_previous_kernel();
  const int lane = int(threadIdx.x) & 31;
  const int64_t c = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (c >= hidden) return;
  float total = to_float(residual[c]);
  for (int s = 0; s < top_k; ++s) {
    const bf16* row = down + (int64_t(expert_ids[s]) * hidden + c) * inner;
    total += weights[s] * round_bf16(warp_dot<kVec>(row, activated + s * inner, inner, lane));
  }
  if (lane == 0) out[c] = from_float<bf16>(total);
}

bool vectorizable(int64_t length, std::initializer_list<const void*> pointers) {
  if (length % 8 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

unsigned blocks_for(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

cudaError_t launch_expert_up_activation(const void* x, const void* up, const int32_t* expert_ids, void* activated,
                                        int64_t top_k, int64_t inner, int64_t hidden, bool gated, cudaStream_t stream) {
  if (top_k == 0 || inner == 0) return cudaSuccess;
  const dim3 grid(blocks_for(inner), unsigned(top_k));
  const auto* xb = static_cast<const bf16*>(x);
  const auto* w = static_cast<const bf16*>(up);
  auto* out = static_cast<bf16*>(activated);
  const bool vector = vectorizable(hidden, {x, up});
  const auto kernel = gated ? (vector ? up_activation_kernel<8, true> : up_activation_kernel<1, true>)
                            : (vector ? up_activation_kernel<8, false> : up_activation_kernel<1, false>);
  gpu::launch_dependent(kernel, grid, kWarpsPerBlock * 32, 0, stream, xb, w, expert_ids, out, inner, hidden);
  return cudaGetLastError();
}

cudaError_t launch_expert_down_combine(const void* activated, const void* down, const int32_t* expert_ids,
                                       const float* weights, const void* residual, void* out, int64_t top_k,
                                       int64_t inner, int64_t hidden, cudaStream_t stream) {
  if (hidden == 0) return cudaSuccess;
  const auto* a = static_cast<const bf16*>(activated);
  const auto* w = static_cast<const bf16*>(down);
  const auto* r = static_cast<const bf16*>(residual);
  auto* o = static_cast<bf16*>(out);
  if (vectorizable(inner, {activated, down}))
    gpu::launch_dependent(down_combine_kernel<8>, blocks_for(hidden), kWarpsPerBlock * 32, 0, stream, a, w, expert_ids,
                          weights, r, o, int(top_k), inner, hidden);
  else
    gpu::launch_dependent(down_combine_kernel<1>, blocks_for(hidden), kWarpsPerBlock * 32, 0, stream, a, w, expert_ids,
                          weights, r, o, int(top_k), inner, hidden);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
