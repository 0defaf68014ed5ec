// Launcher of the NF4 dequantization kernel (ops/cuda/nf4.h wraps it for Tensors).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// out[i] = code[nibble i] · (absmax_map[absmax_codes[i / 64]] · absmax_scales[i / (64·256)] + offset), rounded
// as the CPU reference rounds (no fused multiply-add); out is bf16 or f32.
cudaError_t launch_nf4_dequantize(const uint8_t* packed, const uint8_t* absmax_codes, const float* absmax_scales,
                                  const float* absmax_map, const float* code, float offset, void* out, bool out_is_bf16,
                                  int64_t n, cudaStream_t stream);

// Blockwise quantization as ops/cpu/blockwise_quant.cpp's quantize_block codes each block (the same float32
// operations, so the same codes): blocks of `block` values (64 or 256) of x - subtract (x bf16 or f32), each
// block's absmax into absmax[n / block rounded up], each value's nearest code among `midpoint_count` + 1 sorted
// entries (their midpoints given) into codes: one byte a value, or packed two a byte (NF4: the first value in the
// high nibble, an odd count's last byte padded with code 7) when `pack_nibbles`.
cudaError_t launch_quantize_blocks(const void* x, bool x_is_bf16, float subtract, int64_t n, int block,
                                   const float* midpoints, int midpoint_count, bool pack_nibbles, uint8_t* codes,
                                   float* absmax, cudaStream_t stream);

}  // namespace moetune::ops::cuda
