// The gate added to a base: one block per token, the gate one scalar per row, so a row is read once and, for the
// backward pass, its dot product with y reduced in the block (fixed order, deterministic). The elementwise gate: one
// thread per element, the logits read through a row stride (they sit inside the attention's qkv).
#include <algorithm>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/gate_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

__global__ void gated_add_kernel(const bf16* base, const bf16* y, const float* logits, bf16* out, int64_t width) {
  gpu::wait_for_previous_kernel();
  const int64_t row = int64_t(blockIdx.x) * width;
  const float gate = sigmoid(logits[blockIdx.x]);
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x)
    out[row + i] = from_float<bf16>(to_float(base[row + i]) + gate * to_float(y[row + i]));
}

__global__ void gated_add_backward_kernel(const bf16* dout, const bf16* y, const float* logits, bf16* dy, float* dlogits,
                                          int64_t width) {
  gpu::wait_for_previous_kernel();
  const int64_t row = int64_t(blockIdx.x) * width;
  const float gate = sigmoid(logits[blockIdx.x]);
  float dot[1] = {0.0f};
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float g = to_float(dout[row + i]);
    dy[row + i] = from_float<bf16>(gate * g);
    dot[0] += g * to_float(y[row + i]);
  }
  block_sum(dot);
  if (threadIdx.x == 0) dlogits[blockIdx.x] = dot[0] * gate * (1.0f - gate);
}

__device__ __forceinline__ int64_t strided(int64_t i, int64_t width, int64_t ld) { return i / width * ld + i % width; }

__global__ void gated_kernel(const bf16* y, const bf16* logits, int64_t ld_logits, bf16* out, int64_t rows,
                             int64_t width) {
  gpu::wait_for_previous_kernel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * width;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<bf16>(to_float(y[i]) * sigmoid(to_float(logits[strided(i, width, ld_logits)])));
}

__global__ void gated_backward_kernel(const bf16* dout, const bf16* y, const bf16* logits, int64_t ld_logits, bf16* dy,
                                      bf16* dlogits, int64_t ld_dlogits, int64_t rows, int64_t width) {
  gpu::wait_for_previous_kernel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * width;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = to_float(dout[i]), gate = sigmoid(to_float(logits[strided(i, width, ld_logits)]));
    dlogits[strided(i, width, ld_dlogits)] = from_float<bf16>(g * to_float(y[i]) * gate * (1.0f - gate));
    dy[i] = from_float<bf16>(g * gate);  // after dout is read: dy may be dout
  }
}

unsigned element_blocks(int64_t elements) {
  return unsigned(std::min<int64_t>((elements + kThreads - 1) / kThreads, int64_t(1) << 20));
}

}  // namespace

cudaError_t launch_sigmoid_gated(const void* y, const void* logits, int64_t ld_logits, void* out, int64_t rows,
                                 int64_t width, cudaStream_t stream) {
  if (rows * width == 0) return cudaSuccess;
  gpu::launch_dependent(gated_kernel, element_blocks(rows * width), kThreads, 0, stream, static_cast<const bf16*>(y),
                        static_cast<const bf16*>(logits), ld_logits, static_cast<bf16*>(out), rows, width);
  return cudaGetLastError();
}

cudaError_t launch_sigmoid_gated_backward(const void* dout, const void* y, const void* logits, int64_t ld_logits,
                                          void* dy, void* dlogits, int64_t ld_dlogits, int64_t rows, int64_t width,
                                          cudaStream_t stream) {
  if (rows * width == 0) return cudaSuccess;
  gpu::launch_dependent(gated_backward_kernel, element_blocks(rows * width), kThreads, 0, stream,
                        static_cast<const bf16*>(dout), static_cast<const bf16*>(y), static_cast<const bf16*>(logits),
                        ld_logits, static_cast<bf16*>(dy), static_cast<bf16*>(dlogits), ld_dlogits, rows, width);
  return cudaGetLastError();
}

cudaError_t launch_sigmoid_gated_add(const void* base, const void* y, const float* logits, void* out, int64_t tokens,
                                     int64_t width, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  gpu::launch_dependent(gated_add_kernel, unsigned(tokens), kThreads, 0, stream, static_cast<const bf16*>(base),
                        static_cast<const bf16*>(y), logits, static_cast<bf16*>(out), width);
  return cudaGetLastError();
}

cudaError_t launch_sigmoid_gated_add_backward(const void* dout, const void* y, const float* logits, void* dy,
                                              float* dlogits, int64_t tokens, int64_t width, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  gpu::launch_dependent(gated_add_backward_kernel, unsigned(tokens), kThreads, 0, stream,
                        static_cast<const bf16*>(dout), static_cast<const bf16*>(y), logits, static_cast<bf16*>(dy),
                        dlogits, width);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
