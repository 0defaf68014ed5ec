// Top-k-then-softmax routing, one warp per token: the token's logits live in the warp's registers (lane l owns
// experts l, l + 32, ...), the k picks are k warp-wide arg-max reductions, and lane j keeps pick j for the
// softmax over the k. The backward needs only the weights: dl_j = w_j (dw_j − Σ_i w_i dw_i) on the chosen experts.
#include <climits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/router_kernels.h"
#include "moetune/ops/cuda/router_softmax.cuh"
#include "moetune/ops/cuda/router_topk_softmax_kernels.h"

namespace moetune::ops::cuda {
namespace {

using namespace routing;

constexpr int kWarpsPerBlock = 8;

template <int kSlots>
__global__ void topk_softmax_forward_kernel(const float* __restrict__ logits, int64_t tokens, int experts, int top_k,
                                            int32_t* __restrict__ expert_ids, float* __restrict__ weights) {
  gpu::wait_for_previous_kernel();
  const int64_t token = global_warp();
  if (token >= tokens) return;  // uniform across the warp
  const int lane = lane_id();
  float value[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    value[i] = e < experts ? logits[token * experts + e] : -INFINITY;
  }
  int my_expert = 0;
  float my_logit = 0.0f, first = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    float best;
    int best_expert;
    warp_best(value, lane, best, best_expert);
    if (j == 0) first = best;
    if (lane == j) {
      my_expert = best_expert;
      my_logit = best;
    }
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (lane + i * kWarpSize == best_expert) value[i] = -INFINITY;
  }
  // The first pick is the largest logit: subtracting it keeps exp in range (as the CPU reference does).
  const float e = lane < top_k ? expf(my_logit - first) : 0.0f;
  const float total = warp_sum(e);
  if (lane < top_k) {
    expert_ids[token * top_k + lane] = my_expert;
    weights[token * top_k + lane] = e / total;
  }
}

__global__ void topk_softmax_backward_kernel(const int32_t* __restrict__ expert_ids, const float* __restrict__ weights,
                                             const float* __restrict__ dweights, int64_t tokens, int experts,
                                             int top_k, float* __restrict__ dlogits) {
  gpu::wait_for_previous_kernel();
  const int64_t token = global_warp();
  if (token >= tokens) return;
  const int lane = lane_id();
  float* row = dlogits + token * experts;
  for (int e = lane; e < experts; e += kWarpSize) row[e] = 0.0f;
  const bool holds = lane < top_k;
  const float w = holds ? weights[token * top_k + lane] : 0.0f;
  const float dw = holds ? dweights[token * top_k + lane] : 0.0f;
  const float dot = warp_sum(w * dw);
  __syncwarp();
  if (holds) {
    const int expert = expert_ids[token * top_k + lane];
    if (expert >= 0 && expert < experts) row[expert] = w * (dw - dot);
  }
}

bool valid_shape(int64_t tokens, int experts, int top_k) {
  return tokens >= 0 && top_k >= 1 && top_k <= kRouterMaxTopK && top_k <= experts && experts <= kRouterMaxExperts &&
         (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock <= INT_MAX;
}

unsigned blocks_for(int64_t tokens) { return unsigned((tokens + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

cudaError_t launch_router_topk_softmax_forward(const float* logits, int64_t tokens, int experts, int top_k,
                                               int32_t* expert_ids, float* weights, cudaStream_t stream) {
  if (!valid_shape(tokens, experts, top_k)) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  const dim3 grid{blocks_for(tokens)}, block{kWarpsPerBlock * kWarpSize};
  const auto launch = [&](auto kernel) {
    gpu::launch_dependent(kernel, grid, block, 0, stream, logits, tokens, experts, top_k, expert_ids, weights);
  };
  return launch_with_slots(experts, [&](auto slots) { launch(topk_softmax_forward_kernel<decltype(slots)::value>); });
}

cudaError_t launch_router_topk_softmax_backward(const int32_t* expert_ids, const float* weights, const float* dweights,
                                                int64_t tokens, int experts, int top_k, float* dlogits,
                                                cudaStream_t stream) {
  if (!valid_shape(tokens, experts, top_k)) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  gpu::launch_dependent(topk_softmax_backward_kernel, blocks_for(tokens), kWarpsPerBlock * kWarpSize, 0, stream,
                        expert_ids, weights, dweights, tokens, experts, top_k, dlogits);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
