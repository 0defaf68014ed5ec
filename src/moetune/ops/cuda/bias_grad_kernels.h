// Launcher of the bias-gradient kernel (a column sum): raw pointers in, a CUDA status out. Free of the engine's
// host headers so that the .cu compiles without fmt; ops/cuda/gemm.cpp calls it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// dbias[c] += Σ_r dy[r, c] for dy [rows, cols] bf16 (row stride cols), summed in fp32 in a fixed order, so
// the result is deterministic. dbias [cols] is bf16 when dbias_is_bf16, else f32.
cudaError_t launch_bias_grad(const void* dy, int64_t rows, int64_t cols, void* dbias, bool dbias_is_bf16,
                             cudaStream_t stream);

}  // namespace moetune::ops::cuda
