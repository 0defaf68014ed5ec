// Expert biases (expert_bias.h). The add walks the elements grid-stride and finds each row's group by a binary
// search over the E + 1 offsets (a few cached reads). The gradient gives each block 32 adjacent columns of one
// group: a warp reads 32 consecutive bf16 values of a row (coalesced), the block's 16 row lanes stride down the
// group's rows, and their partial sums meet in shared memory in a fixed order.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/expert_bias_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using pointwise::from_float;
using pointwise::to_float;

constexpr int kThreads = 256;
constexpr int kColumnsPerBlock = 32;
constexpr int kRowLanes = 16;

// The group holding `row`, or -1 past offsets[experts]: the last e with offsets[e] <= row (empty groups skipped).
__device__ __forceinline__ int group_of(const int32_t* __restrict__ offsets, int experts, int64_t row) {
  if (row >= offsets[experts]) return -1;
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= row) lo = mid; else hi = mid - 1;
  }
  return lo;
}

template <typename Bias>
__global__ void expert_bias_add_kernel(__nv_bfloat16* __restrict__ y, int64_t rows, int64_t cols,
                                       const Bias* __restrict__ bias, const int32_t* __restrict__ offsets,
                                       int experts) {
  gpu::wait_for_previous_kernel();
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / cols, col = i - row * cols;
    const int e = group_of(offsets, experts, row);
    if (e < 0) continue;
    y[i] = __float2bfloat16_rn(__bfloat162float(y[i]) + to_float(bias[int64_t(e) * cols + col]));
  }
}

template <typename Grad>
__global__ void expert_bias_grad_kernel(const __nv_bfloat16* __restrict__ dy, int64_t cols,
                                        const int32_t* __restrict__ offsets, Grad* __restrict__ dbias) {
  gpu::wait_for_previous_kernel();
  __shared__ float partial[kRowLanes][kColumnsPerBlock + 1];  // +1: no bank conflicts on the column read
  const int e = blockIdx.y;
  const int64_t col = int64_t(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  const int64_t begin = offsets[e], end = offsets[e + 1];
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowLanes) sum += __bfloat162float(dy[r * cols + col]);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols && end > begin) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    Grad* g = dbias + int64_t(e) * cols + col;
    *g = from_float<Grad>(to_float(*g) + total);
  }
}

}  // namespace

cudaError_t launch_expert_bias_add(void* y, int64_t rows, int64_t cols, const void* bias, bool bias_is_bf16,
                                   const int32_t* offsets, int experts, cudaStream_t stream) {
  if (rows == 0 || cols == 0 || experts == 0) return cudaSuccess;
  const int blocks = int(std::min<int64_t>((rows * cols + kThreads - 1) / kThreads, 65535));
  auto* out = static_cast<__nv_bfloat16*>(y);
  if (bias_is_bf16)
    gpu::launch_dependent(expert_bias_add_kernel<__nv_bfloat16>, blocks, kThreads, 0, stream, out, rows, cols,
                          static_cast<const __nv_bfloat16*>(bias), offsets, experts);
  else
    gpu::launch_dependent(expert_bias_add_kernel<float>, blocks, kThreads, 0, stream, out, rows, cols,
                          static_cast<const float*>(bias), offsets, experts);
  return cudaGetLastError();
}

cudaError_t launch_expert_bias_grad(const void* dy, int64_t cols, const int32_t* offsets, int experts, void* dbias,
                                    bool dbias_is_bf16, cudaStream_t stream) {
  if (cols == 0 || experts == 0) return cudaSuccess;
  const int64_t column_blocks = (cols + kColumnsPerBlock - 1) / kColumnsPerBlock;
  if (column_blocks > INT_MAX || experts > 65535) return cudaErrorInvalidValue;
  const dim3 grid{unsigned(column_blocks), unsigned(experts)}, threads{kColumnsPerBlock, kRowLanes};
  const auto* d = static_cast<const __nv_bfloat16*>(dy);
  if (dbias_is_bf16)
    gpu::launch_dependent(expert_bias_grad_kernel<__nv_bfloat16>, grid, threads, 0, stream, d, cols, offsets,
                          static_cast<__nv_bfloat16*>(dbias));
  else
    gpu::launch_dependent(expert_bias_grad_kernel<float>, grid, threads, 0, stream, d, cols, offsets,
                          static_cast<float*>(dbias));
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
