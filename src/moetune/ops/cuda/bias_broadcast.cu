// Bias in the forward of a linear layer: the bias is written into every row of y first, and the GEMM then adds
// x·Wᵀ onto it with beta = 1. One path for every dtype pair (bf16/f32 bias and output) where cuBLASLt's bias
// epilogue constrains the bias dtype to the output's; the extra pass over y is small beside the GEMM, and
// bias is rare in the supported models.
#include <cuda_bf16.h>

#include <algorithm>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/bias_broadcast_kernels.h"

namespace moetune::ops::cuda {
namespace {

__device__ __forceinline__ float load_float(const float* p) { return *p; }
__device__ __forceinline__ float load_float(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store_float(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_float(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename Bias, typename Out>
__global__ void bias_broadcast_kernel(const Bias* __restrict__ bias, Out* __restrict__ y, int64_t rows, int64_t cols) {
  gpu::wait_for_previous_kernel();
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store_float(y + i, load_float(bias + i % cols));
}

template <typename Bias, typename Out>
cudaError_t launch(const void* bias, void* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t n = rows * cols;
  const int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  gpu::launch_dependent(bias_broadcast_kernel<Bias, Out>, blocks, kThreads, 0, stream, static_cast<const Bias*>(bias),
                        static_cast<Out*>(y), rows, cols);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_bias_broadcast(const void* bias, bool bias_is_bf16, void* y, bool y_is_bf16, int64_t rows,
                                  int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (bias_is_bf16)
    return y_is_bf16 ? launch<__nv_bfloat16, __nv_bfloat16>(bias, y, rows, cols, stream)
                     : launch<__nv_bfloat16, float>(bias, y, rows, cols, stream);
  return y_is_bf16 ? launch<float, __nv_bfloat16>(bias, y, rows, cols, stream)
                   : launch<float, float>(bias, y, rows, cols, stream);
}

}  // namespace moetune::ops::cuda
