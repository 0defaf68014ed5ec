// Launchers of the softmax top-k router kernels: raw device pointers in, a CUDA status out. Free of the engine's
// host headers so that router.cu compiles without fmt; ops/cuda/router.cpp checks the Tensors and calls them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moetune/ops/router_limits.h"

namespace moetune::ops::cuda {

// The limits of the one-warp-per-token kernels (the launchers answer cudaErrorInvalidValue past them).
using ops::kRouterMaxExperts;
using ops::kRouterMaxGroups;
using ops::kRouterMaxTopK;

// DeepSeek-V2's group limit (group_limited_greedy) and weight factor (routed_scaling_factor); {1, 1, 1} is the
// plain softmax top-k router.
struct SoftmaxGroupLimit {
  int groups = 1, topk_groups = 1;  // groups ≤ kRouterMaxGroups (one lane scores each), dividing experts
  float scaling = 1.0f;
  // ERNIE 4.5's choice (ops/router.h's SoftmaxTopkOptions::choice_bias): the k largest p + choice_bias[e], weighted
  // by p; F32 [experts] on the device, with one group. Null: the k largest p.
  const float* choice_bias = nullptr;
};

// logits [tokens, experts] f32 -> expert_ids [tokens, top_k] i32 (most probable first, or by p + choice_bias; ties to
// the lower index; only experts of the limit's topk_groups best groups, a group scored by its most probable expert) and
// weights [tokens, top_k] f32 (renormalised over the k when `normalize`, then times the limit's scaling).
cudaError_t launch_router_topk_forward(const float* logits, int64_t tokens, int experts, int top_k, bool normalize,
                                       SoftmaxGroupLimit limit, int32_t* expert_ids, float* weights,
                                       cudaStream_t stream);

// dlogits [tokens, experts] f32 from dweights [tokens, top_k] f32, through the scaling, the renormalisation and
// the softmax (recomputed from logits; the group limit only chooses). Overwrites dlogits.
cudaError_t launch_router_topk_backward(const float* logits, const int32_t* expert_ids, const float* weights,
                                        const float* dweights, int64_t tokens, int experts, int top_k, bool normalize,
                                        float scaling, float* dlogits, cudaStream_t stream);

}  // namespace moetune::ops::cuda
