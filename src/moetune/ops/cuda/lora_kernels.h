// Launchers of the LoRA helper kernels (ops/cuda/lora.h wraps them for Tensors): raw bf16 pointers in, a CUDA
// status out, free of the engine's host headers so that the .cu file compiles without fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moetune/ops/lora_dropout.h"

namespace moetune::ops::cuda {

// dst[t, first + j] += scale · src[t, j] for src [rows, cols], dst [rows, width].
cudaError_t launch_add_scaled_columns(const void* src, float scale, void* dst, int64_t rows, int64_t cols, int64_t width,
                                      int64_t first, cudaStream_t stream);
// dst[t, j] = scale · src[t, first + j] for src [rows, width], dst [rows, cols].
cudaError_t launch_copy_scaled_columns(const void* src, float scale, void* dst, int64_t rows, int64_t cols, int64_t width,
                                       int64_t first, cudaStream_t stream);
// Between PEFT's packed expert B [out, r·E] (expert e's column k at k·E + e) and the grouped GEMMs' [E, out, r]:
// grouped = the packed values rearranged; or packed += scale · grouped rearranged back.
cudaError_t launch_expert_b_to_grouped(const void* packed, void* grouped, int64_t experts, int64_t out, int64_t rank,
                                       cudaStream_t stream);
cudaError_t launch_add_grouped_to_expert_b(const void* grouped, float scale, void* packed, int64_t experts, int64_t out,
                                           int64_t rank, cudaStream_t stream);

// LoRA dropout (ops/lora_dropout.h) on n bf16 values: out[i] = dropout.apply(i, x[i]) (out may not alias x), or
// dst[i] += dropout.apply(i, src[i]) (the backward pass into d(x)).
cudaError_t launch_lora_dropout_apply(const void* x, LoraDropout dropout, void* out, int64_t n, cudaStream_t stream);
cudaError_t launch_lora_dropout_add(const void* src, LoraDropout dropout, void* dst, int64_t n, cudaStream_t stream);

}  // namespace moetune::ops::cuda
