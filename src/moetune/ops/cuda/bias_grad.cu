// Bias gradient: the column sum of dy. Each block owns 32 adjacent columns, so a warp reads 32 consecutive
// bf16 values of a row (coalesced); the block's 16 row lanes stride down the rows and their partial sums meet
// in shared memory. Bias is rare in the supported models (Qwen3 has none), so this favours simplicity over peak.
#include <cuda_bf16.h>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/bias_grad_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr int kColumnsPerBlock = 32;
constexpr int kRowLanes = 16;

__device__ __forceinline__ float load_float(const float* p) { return *p; }
__device__ __forceinline__ float load_float(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_float(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_float(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename Grad>
__global__ void bias_grad_kernel(const __nv_bfloat16* __restrict__ dy, int64_t rows, int64_t cols,
                                 Grad* __restrict__ dbias) {
  gpu::wait_for_previous_kernel();
  __shared__ float partial[kRowLanes][kColumnsPerBlock + 1];  // +1: no bank conflicts on the column read
  const int64_t col = int64_t(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  float sum = 0.0f;
  if (col < cols)
    for (int64_t r = threadIdx.y; r < rows; r += kRowLanes) sum += __bfloat162float(dy[r * cols + col]);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += partial[lane][threadIdx.x];
    store_float(dbias + col, load_float(dbias + col) + total);
  }
}

}  // namespace

cudaError_t launch_bias_grad(const void* dy, int64_t rows, int64_t cols, void* dbias, bool dbias_is_bf16,
                             cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int64_t blocks = (cols + kColumnsPerBlock - 1) / kColumnsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 threads(kColumnsPerBlock, kRowLanes);
  const auto* dy_bf16 = static_cast<const __nv_bfloat16*>(dy);
  if (dbias_is_bf16)
    gpu::launch_dependent(bias_grad_kernel<__nv_bfloat16>, unsigned(blocks), threads, 0, stream, dy_bf16, rows, cols,
                          static_cast<__nv_bfloat16*>(dbias));
  else
    gpu::launch_dependent(bias_grad_kernel<float>, unsigned(blocks), threads, 0, stream, dy_bf16, rows, cols,
                          static_cast<float*>(dbias));
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
