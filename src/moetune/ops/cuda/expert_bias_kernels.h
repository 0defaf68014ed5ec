// Launchers of the expert-bias kernels (expert_bias.h): raw pointers in, a CUDA status out.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

cudaError_t launch_expert_bias_add(void* y, int64_t rows, int64_t cols, const void* bias, bool bias_is_bf16,
                                   const int32_t* offsets, int experts, cudaStream_t stream);

cudaError_t launch_expert_bias_grad(const void* dy, int64_t cols, const int32_t* offsets, int experts, void* dbias,
                                    bool dbias_is_bf16, cudaStream_t stream);

}  // namespace moetune::ops::cuda
