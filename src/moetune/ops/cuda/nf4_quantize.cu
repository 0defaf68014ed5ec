// Blockwise quantization on the GPU (QLoRA's base quantized as it is uploaded; the double quantization of its
// absmax values): 256 threads a CTA, one value a thread, the CTA covering 256 consecutive values, so a block of
// 64 or 256 is a fixed group of its warps. A block's absmax is the maximum of |value| over its warps (a maximum is
// exact in any order); each value's code is then ops/blockwise_quant_math.h's rule, the CPU reference's code.
#include <algorithm>
#include <cstdint>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/half.h"
#include "moetune/ops/blockwise_quant_math.h"
#include "moetune/ops/cuda/nf4_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32, kMaxMidpoints = 255;

template <typename In>
__device__ float load_value(const In* x, int64_t i);
template <>
__device__ float load_value<uint16_t>(const uint16_t* x, int64_t i) { return bf16_to_f32(x[i]); }
template <>
__device__ float load_value<float>(const float* x, int64_t i) { return x[i]; }

template <typename In>
__global__ void quantize_blocks_kernel(const In* __restrict__ x, float subtract, int64_t n, int block,
                                       const float* __restrict__ midpoints_in, int midpoint_count, bool pack_nibbles,
                                       uint8_t* __restrict__ codes, float* __restrict__ absmax) {
  gpu::wait_for_previous_kernel();
  __shared__ float midpoints[kMaxMidpoints];
  __shared__ float warp_max[kWarps];
  for (int i = threadIdx.x; i < midpoint_count; i += kThreads) midpoints[i] = midpoints_in[i];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps_per_block = block / 32;
  const int first_warp = warp / warps_per_block * warps_per_block;
  for (int64_t base = blockIdx.x * int64_t(kThreads); base < n; base += int64_t(gridDim.x) * kThreads) {
    const int64_t i = base + threadIdx.x;
    // As the CPU: the value minus the offset (x - 0 is x, -0 included), absmax from 0 up (NaN never wins a max).
    const float value = i < n ? load_value(x, i) - subtract : 0.0f;
    float m = fabsf(value);
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    __syncthreads();  // the last iteration's readers of warp_max are done (and the midpoints are in)
    if (lane == 0) warp_max[warp] = m;
    __syncthreads();
    float block_max = 0.0f;
    for (int w = first_warp; w < first_warp + warps_per_block; ++w) block_max = fmaxf(block_max, warp_max[w]);
    const int64_t block_start = base + int64_t(first_warp) * 32;
    const BlockScale scale = block_scale(block_max, block_start + block <= n);
    const uint8_t code = nearest_code(midpoints, midpoint_count, scale.unit(value));
    const uint8_t next = uint8_t(__shfl_down_sync(0xffffffffu, uint32_t(code), 1));
    if (i < n) {
      if (!pack_nibbles) codes[i] = code;
      else if (i % 2 == 0) codes[i / 2] = uint8_t(code << 4 | (i + 1 < n ? next : 7));
    }
    if (threadIdx.x % block == 0 && block_start < n) absmax[block_start / block] = block_max;
  }
}

}  // namespace

cudaError_t launch_quantize_blocks(const void* x, bool x_is_bf16, float subtract, int64_t n, int block,
                                   const float* midpoints, int midpoint_count, bool pack_nibbles, uint8_t* codes,
                                   float* absmax, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (block % 32 != 0 || kThreads % block != 0 || midpoint_count > kMaxMidpoints) return cudaErrorInvalidValue;
  const int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, 8192));
  if (x_is_bf16)
    gpu::launch_dependent(quantize_blocks_kernel<uint16_t>, blocks, kThreads, 0, stream,
                          static_cast<const uint16_t*>(x), subtract, n, block, midpoints, midpoint_count, pack_nibbles,
                          codes, absmax);
  else
    gpu::launch_dependent(quantize_blocks_kernel<float>, blocks, kThreads, 0, stream, static_cast<const float*>(x),
                          subtract, n, block, midpoints, midpoint_count, pack_nibbles, codes, absmax);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
