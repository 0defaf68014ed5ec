// Launchers of the top-k-then-softmax router kernels (router_topk_softmax.h): raw pointers in, a CUDA status out.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

cudaError_t launch_router_topk_softmax_forward(const float* logits, int64_t tokens, int experts, int top_k,
                                               int32_t* expert_ids, float* weights, cudaStream_t stream);

cudaError_t launch_router_topk_softmax_backward(const int32_t* expert_ids, const float* weights, const float* dweights,
                                                int64_t tokens, int experts, int top_k, float* dlogits,
                                                cudaStream_t stream);

}  // namespace moetune::ops::cuda
