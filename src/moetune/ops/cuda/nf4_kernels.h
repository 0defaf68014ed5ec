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

}  // namespace moetune::ops::cuda
