// Launchers of the cast kernels: raw pointers in, a CUDA status out. Kept free of the engine's host headers
// so that .cu files compile without fmt (nvcc cannot evaluate its consteval checks); ops/cuda/cast.cpp wraps
// them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

enum class CastKind { Bf16ToF32, F32ToBf16, F16ToF32, F32ToF16 };

cudaError_t launch_cast(CastKind kind, const void* in, void* out, int64_t n, cudaStream_t stream);

}  // namespace moetune::ops::cuda
