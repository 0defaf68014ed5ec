// NF4 dequantization, one value per thread, grid-stride: a block's absmax is decoded from its 8-bit code with
// the same float operations, in the same order, as ops/cpu/nf4.cpp (explicit _rn intrinsics keep nvcc from
// fusing them into an FMA), so the f32 result is bit-identical to the CPU's and the bf16 one its rounding.
#include <algorithm>
#include <cstdint>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/half.h"
#include "moetune/ops/cuda/nf4_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr int64_t kBlock = 64, kAbsmaxBlock = 256;

template <typename Out>
__global__ void nf4_dequantize_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ absmax_codes,
                                      const float* __restrict__ absmax_scales, const float* __restrict__ absmax_map,
                                      const float* __restrict__ code, float offset, Out* __restrict__ out, int64_t n) {
  gpu::wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t block = i / kBlock;
    const float absmax = __fadd_rn(__fmul_rn(absmax_map[absmax_codes[block]], absmax_scales[block / kAbsmaxBlock]), offset);
    const uint8_t byte = packed[i / 2];
    const float value = __fmul_rn(code[i % 2 ? byte & 15 : byte >> 4], absmax);
    if constexpr (sizeof(Out) == 2) out[i] = f32_to_bf16(value);
    else out[i] = value;
  }
}

// The same values, eight a thread (QLoRA's scratch, model/cuda/nf4_base.h, is refilled from the whole base twice a
// step, so this runs at memory speed): four packed bytes in one load, eight bf16 out in one 16-byte store, the
// block's absmax decoded once (eight values never straddle a block of 64). Needs n % 8 == 0 and `out` 16-byte
// aligned.
__global__ void nf4_dequantize8_bf16_kernel(const uint32_t* __restrict__ packed, const uint8_t* __restrict__ absmax_codes,
                                            const float* __restrict__ absmax_scales, const float* __restrict__ absmax_map,
                                            const float* __restrict__ code_table, float offset, uint4* __restrict__ out,
                                            int64_t groups) {
  gpu::wait_for_previous_kernel();
  __shared__ float code[16];
  if (threadIdx.x < 16) code[threadIdx.x] = code_table[threadIdx.x];
  __syncthreads();
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups; g += int64_t(gridDim.x) * blockDim.x) {
    const int64_t block = g * 8 / kBlock;
    const float absmax = __fadd_rn(__fmul_rn(absmax_map[absmax_codes[block]], absmax_scales[block / kAbsmaxBlock]), offset);
    const uint32_t bytes = packed[g];  // byte j holds values 2j (high nibble) and 2j + 1 (low nibble)
    uint32_t pairs[4];
    for (int j = 0; j < 4; ++j) {
      const uint32_t byte = (bytes >> (8 * j)) & 0xFF;
      const uint32_t first = f32_to_bf16(__fmul_rn(code[byte >> 4], absmax));
      const uint32_t second = f32_to_bf16(__fmul_rn(code[byte & 15], absmax));
      pairs[j] = first | second << 16;
    }
    out[g] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  }
}

}  // namespace

cudaError_t launch_nf4_dequantize(const uint8_t* packed, const uint8_t* absmax_codes, const float* absmax_scales,
                                  const float* absmax_map, const float* code, float offset, void* out, bool out_is_bf16,
                                  int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int blocks = int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  const bool vectorized = out_is_bf16 && n % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(packed) % 4 == 0;
  if (vectorized) {
    const int64_t groups = n / 8;
    const int vector_blocks = int(std::min<int64_t>((groups + kThreads - 1) / kThreads, 65535));
    gpu::launch_dependent(nf4_dequantize8_bf16_kernel, vector_blocks, kThreads, 0, stream,
                          reinterpret_cast<const uint32_t*>(packed), absmax_codes, absmax_scales, absmax_map, code,
                          offset, static_cast<uint4*>(out), groups);
  } else if (out_is_bf16)
    gpu::launch_dependent(nf4_dequantize_kernel<uint16_t>, blocks, kThreads, 0, stream, packed, absmax_codes,
                          absmax_scales, absmax_map, code, offset, static_cast<uint16_t*>(out), n);
  else
    gpu::launch_dependent(nf4_dequantize_kernel<float>, blocks, kThreads, 0, stream, packed, absmax_codes,
                          absmax_scales, absmax_map, code, offset, static_cast<float*>(out), n);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
