// Launchers of the sigmoid group-limited router kernels: raw device pointers in, a CUDA status out (free of the
// engine's host headers; ops/cuda/sigmoid_router.cpp checks the Tensors and calls them).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moetune/ops/router_limits.h"

namespace moetune::ops::cuda {

using ops::kRouterMaxGroups;  // one lane per group ranks the groups

struct SigmoidRouterShape {
  int64_t tokens = 0;
  int experts = 0, top_k = 1, num_groups = 1, topk_groups = 1;
  bool renormalize = false;
  float scaling = 1.0f;
};

// correction_bias may be null (zeros).
cudaError_t launch_sigmoid_router_forward(const float* logits, const float* correction_bias, SigmoidRouterShape shape,
                                          int32_t* expert_ids, float* weights, cudaStream_t stream);

cudaError_t launch_sigmoid_router_backward(const float* logits, const int32_t* expert_ids, const float* dweights,
                                           SigmoidRouterShape shape, float* dlogits, cudaStream_t stream);

}  // namespace moetune::ops::cuda
