// LoRA's data movement around its GEMMs: one element per thread, grid-stride, bf16 storage with fp32 math.
// These are small next to the GEMMs (a rank-r matrix, or one adapter's columns of a projection's output).
#include <algorithm>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/half.h"
#include "moetune/ops/cuda/lora_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

#define MOETUNE_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void add_scaled_columns_kernel(const uint16_t* __restrict__ src, float scale, uint16_t* __restrict__ dst,
                                          int64_t rows, int64_t cols, int64_t width, int64_t first) {
  gpu::wait_for_previous_kernel();
  MOETUNE_GRID_STRIDE(i, rows * cols) {
    const int64_t t = i / cols, j = i % cols;
    uint16_t& d = dst[t * width + first + j];
    d = f32_to_bf16(bf16_to_f32(d) + scale * bf16_to_f32(src[i]));
  }
}

__global__ void copy_scaled_columns_kernel(const uint16_t* __restrict__ src, float scale, uint16_t* __restrict__ dst,
                                           int64_t rows, int64_t cols, int64_t width, int64_t first) {
  gpu::wait_for_previous_kernel();
  MOETUNE_GRID_STRIDE(i, rows * cols) {
    const int64_t t = i / cols, j = i % cols;
    dst[i] = f32_to_bf16(scale * bf16_to_f32(src[t * width + first + j]));
  }
}

// i indexes grouped [E, out, r]; the same element of the packed [out, r·E].
__device__ int64_t packed_index(int64_t i, int64_t experts, int64_t out, int64_t rank) {
  const int64_t e = i / (out * rank), o = i / rank % out, k = i % rank;
  return o * rank * experts + k * experts + e;
}

__global__ void expert_b_to_grouped_kernel(const uint16_t* __restrict__ packed, uint16_t* __restrict__ grouped,
                                           int64_t experts, int64_t out, int64_t rank) {
  gpu::wait_for_previous_kernel();
  MOETUNE_GRID_STRIDE(i, experts * out * rank) grouped[i] = packed[packed_index(i, experts, out, rank)];
}

__global__ void add_grouped_to_expert_b_kernel(const uint16_t* __restrict__ grouped, float scale,
                                               uint16_t* __restrict__ packed, int64_t experts, int64_t out, int64_t rank) {
  gpu::wait_for_previous_kernel();
  MOETUNE_GRID_STRIDE(i, experts * out * rank) {
    uint16_t& p = packed[packed_index(i, experts, out, rank)];
    p = f32_to_bf16(bf16_to_f32(p) + scale * bf16_to_f32(grouped[i]));
  }
}

// The same two moves a row o of the packed B at a time, through shared memory: the packed row [r, E] is read and
// written whole (coalesced), and each expert's r values of the grouped side are one contiguous run. Used when a
// row fits in shared memory (r·E·2 bytes: 4 KB for rank 16 over 128 experts).
__global__ void expert_b_to_grouped_rows_kernel(const uint16_t* __restrict__ packed, uint16_t* __restrict__ grouped,
                                                int64_t experts, int64_t out, int64_t rank) {
  gpu::wait_for_previous_kernel();
  extern __shared__ uint16_t row[];
  const int64_t width = rank * experts;
  for (int64_t o = blockIdx.x; o < out; o += gridDim.x) {
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) row[j] = packed[o * width + j];
    __syncthreads();
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const int64_t e = j / rank, k = j % rank;
      grouped[(e * out + o) * rank + k] = row[k * experts + e];
    }
    __syncthreads();
  }
}

__global__ void add_grouped_to_expert_b_rows_kernel(const uint16_t* __restrict__ grouped, float scale,
                                                    uint16_t* __restrict__ packed, int64_t experts, int64_t out,
                                                    int64_t rank) {
  gpu::wait_for_previous_kernel();
  extern __shared__ uint16_t row[];
  const int64_t width = rank * experts;
  for (int64_t o = blockIdx.x; o < out; o += gridDim.x) {
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      const int64_t e = j / rank, k = j % rank;
      row[k * experts + e] = grouped[(e * out + o) * rank + k];
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      uint16_t& p = packed[o * width + j];
      p = f32_to_bf16(bf16_to_f32(p) + scale * bf16_to_f32(row[j]));
    }
    __syncthreads();
  }
}

constexpr int64_t kRowKernelSharedBytes = 48 << 10;

int row_blocks(int64_t out) { return int(std::min<int64_t>(out, 65535)); }

// The mask is a pure function of (key, i): no state, so the backward pass and a recomputed forward regenerate it.
__global__ void lora_dropout_apply_kernel(const uint16_t* __restrict__ x, LoraDropout dropout, uint16_t* __restrict__ out,
                                          int64_t n) {
  gpu::wait_for_previous_kernel();
  MOETUNE_GRID_STRIDE(i, n) out[i] = f32_to_bf16(dropout.apply(uint64_t(i), bf16_to_f32(x[i])));
}

__global__ void lora_dropout_add_kernel(const uint16_t* __restrict__ src, LoraDropout dropout, uint16_t* __restrict__ dst,
                                        int64_t n) {
  gpu::wait_for_previous_kernel();
  MOETUNE_GRID_STRIDE(i, n) {
    const float dropped = dropout.apply(uint64_t(i), bf16_to_f32(src[i]));
    dst[i] = f32_to_bf16(bf16_to_f32(dst[i]) + dropped);
  }
}

#undef MOETUNE_GRID_STRIDE

}  // namespace

cudaError_t launch_add_scaled_columns(const void* src, float scale, void* dst, int64_t rows, int64_t cols, int64_t width,
                                      int64_t first, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  gpu::launch_dependent(add_scaled_columns_kernel, blocks_for(rows * cols), kThreads, 0, stream,
                        static_cast<const uint16_t*>(src), scale, static_cast<uint16_t*>(dst), rows, cols, width,
                        first);
  return cudaGetLastError();
}

cudaError_t launch_copy_scaled_columns(const void* src, float scale, void* dst, int64_t rows, int64_t cols, int64_t width,
                                       int64_t first, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  gpu::launch_dependent(copy_scaled_columns_kernel, blocks_for(rows * cols), kThreads, 0, stream,
                        static_cast<const uint16_t*>(src), scale, static_cast<uint16_t*>(dst), rows, cols, width,
                        first);
  return cudaGetLastError();
}

cudaError_t launch_expert_b_to_grouped(const void* packed, void* grouped, int64_t experts, int64_t out, int64_t rank,
                                       cudaStream_t stream) {
  const int64_t n = experts * out * rank;
  if (n == 0) return cudaSuccess;
  if (const int64_t shared = rank * experts * 2; shared <= kRowKernelSharedBytes)
    gpu::launch_dependent(expert_b_to_grouped_rows_kernel, row_blocks(out), kThreads, size_t(shared), stream,
                          static_cast<const uint16_t*>(packed), static_cast<uint16_t*>(grouped), experts, out, rank);
  else
    gpu::launch_dependent(expert_b_to_grouped_kernel, blocks_for(n), kThreads, 0, stream,
                          static_cast<const uint16_t*>(packed), static_cast<uint16_t*>(grouped), experts, out, rank);
  return cudaGetLastError();
}

cudaError_t launch_add_grouped_to_expert_b(const void* grouped, float scale, void* packed, int64_t experts, int64_t out,
                                           int64_t rank, cudaStream_t stream) {
  const int64_t n = experts * out * rank;
  if (n == 0) return cudaSuccess;
  if (const int64_t shared = rank * experts * 2; shared <= kRowKernelSharedBytes)
    gpu::launch_dependent(add_grouped_to_expert_b_rows_kernel, row_blocks(out), kThreads, size_t(shared), stream,
                          static_cast<const uint16_t*>(grouped), scale, static_cast<uint16_t*>(packed), experts, out,
                          rank);
  else
    gpu::launch_dependent(add_grouped_to_expert_b_kernel, blocks_for(n), kThreads, 0, stream,
                          static_cast<const uint16_t*>(grouped), scale, static_cast<uint16_t*>(packed), experts, out,
                          rank);
  return cudaGetLastError();
}

cudaError_t launch_lora_dropout_apply(const void* x, LoraDropout dropout, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  gpu::launch_dependent(lora_dropout_apply_kernel, blocks_for(n), kThreads, 0, stream, static_cast<const uint16_t*>(x),
                        dropout, static_cast<uint16_t*>(out), n);
  return cudaGetLastError();
}

cudaError_t launch_lora_dropout_add(const void* src, LoraDropout dropout, void* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  gpu::launch_dependent(lora_dropout_add_kernel, blocks_for(n), kThreads, 0, stream, static_cast<const uint16_t*>(src),
                        dropout, static_cast<uint16_t*>(dst), n);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
