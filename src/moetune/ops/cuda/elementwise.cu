// Elementwise scaled sums, grid-stride over 16-byte chunks (8 bf16 or 4 f32) when the pointers allow it, one element at
// a time otherwise. Each element is read and written by the same thread, so an output may be one of the inputs.
#include <algorithm>
#include <initializer_list>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/elementwise_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

// The first n / kVec·kVec elements in chunks; the remaining tail (fewer than kVec) one per thread.
// Scales of 1 multiply by nothing (x · 1 is x in fp32 anyway; this keeps the plain sum's instructions).
__device__ __forceinline__ float scaled(float x, float scale) { return scale == 1.0f ? x : x * scale; }

template <typename T, int kVec>
__global__ void add_kernel(const T* a, float a_scale, const T* b, float b_scale, T* out, int64_t n) {
  gpu::wait_for_previous_kernel();
  const int64_t chunks = n / kVec, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t chunk = first; chunk < chunks; chunk += stride) {
    float x[kVec], y[kVec] = {};
    load<kVec>(a + chunk * kVec, x);
    if (b) load<kVec>(b + chunk * kVec, y);
#pragma unroll
    for (int k = 0; k < kVec; ++k) x[k] = scaled(x[k], a_scale) + scaled(y[k], b_scale);
    store<kVec>(out + chunk * kVec, x);
  }
  const int64_t tail = chunks * kVec + first;
  if (tail < n)
    out[tail] = from_float<T>(scaled(to_float(a[tail]), a_scale) + (b ? scaled(to_float(b[tail]), b_scale) : 0.0f));
}

bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

unsigned blocks_for(int64_t work) {
  return unsigned(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

template <typename T>
cudaError_t add(const void* a, float a_scale, const void* b, float b_scale, void* out, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const auto* ap = static_cast<const T*>(a);
  const auto* bp = static_cast<const T*>(b);
  auto* op = static_cast<T*>(out);
  // The tail is done by the first threads of the grid, so the grid must have at least kVec threads (it does:
  // a block is 256).
  if (aligned16({a, b, out}))  // a null b is aligned
    gpu::launch_dependent(add_kernel<T, kVec>, blocks_for(n / kVec), kThreads, 0, stream, ap, a_scale, bp, b_scale, op,
                          n);
  else
    gpu::launch_dependent(add_kernel<T, 1>, blocks_for(n), kThreads, 0, stream, ap, a_scale, bp, b_scale, op, n);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_add(const void* a, float a_scale, const void* b, float b_scale, void* out, int64_t n, bool is_bf16,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return is_bf16 ? add<bf16>(a, a_scale, b, b_scale, out, n, stream)
                 : add<float>(a, a_scale, b, b_scale, out, n, stream);
}

}  // namespace moetune::ops::cuda
