// Launcher of the bias-broadcast kernel: raw pointers in, a CUDA status out. Free of the engine's host
// headers so that the .cu compiles without fmt; ops/cuda/gemm.cpp calls it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// y[r, c] = bias[c] for y [rows, cols] (row stride cols). bias is bf16 when bias_is_bf16 else f32; y is bf16
// when y_is_bf16 else f32.
cudaError_t launch_bias_broadcast(const void* bias, bool bias_is_bf16, void* y, bool y_is_bf16, int64_t rows,
                                  int64_t cols, cudaStream_t stream);

}  // namespace moetune::ops::cuda
