// Softmax top-k routing, one warp per token: the token's softmax lives in the warp's registers (router_softmax.cuh),
// the k picks are k warp-wide arg-max reductions (within DeepSeek-V2's kept groups, when limited), and the backward
// recomputes the softmax rather than storing it.
#include <climits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/router_kernels.h"
#include "moetune/ops/cuda/router_softmax.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace routing;

constexpr int kWarpsPerBlock = 8;

// values[slot of `expert`] as its owning lane holds it, on every lane (a warp-uniform expert < 32 · kSlots).
template <int kSlots>
__device__ __forceinline__ float slot_value(const float (&values)[kSlots], int expert) {
  float value = 0.0f;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const float owned = __shfl_sync(kFullWarp, values[i], expert & (kWarpSize - 1));
    if (expert / kWarpSize == i) value = owned;
  }
  return value;
}

template <int kSlots>
__global__ void router_topk_forward_kernel(const float* __restrict__ logits, int64_t tokens, int experts, int top_k,
                                           bool normalize, SoftmaxGroupLimit limit, int32_t* __restrict__ expert_ids,
                                           float* __restrict__ weights) {
  gpu::wait_for_previous_kernel();
  const int64_t token = global_warp();
  if (token >= tokens) return;  // uniform across the warp
  const int lane = lane_id();
  float prob[kSlots];
  softmax_row<kSlots>(logits + token * experts, experts, lane, prob);
  // Padding slots, experts outside the kept groups and already chosen experts sit at -inf, below any real
  // probability (even an underflowed 0). Lane g scores group g by its most probable expert.
  float group_score = -INFINITY;
  if (limit.topk_groups < limit.groups) {
    const int group_size = experts / limit.groups;
    for (int g = 0; g < limit.groups; ++g) {
      float best = -INFINITY;
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        const int e = lane + i * kWarpSize;
        if (e < experts && e / group_size == g) best = fmaxf(best, prob[i]);
      }
      best = warp_max(best);
      if (lane == g) group_score = best;
    }
  }
  keep_best_groups(group_score, lane, experts, limit.groups, limit.topk_groups, prob);
  // What the choice ranks: p, or ERNIE 4.5's p + choice_bias (in fp32, as transformers adds them).
  float score[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    score[i] = limit.choice_bias && e < experts ? prob[i] + limit.choice_bias[e] : prob[i];
  }

  int my_expert = 0;  // lane j keeps pick j
  float my_prob = 0.0f, chosen_total = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    float best;
    int best_expert;
    warp_best(score, lane, best, best_expert);
    const float chosen = limit.choice_bias ? slot_value(prob, best_expert) : best;
    chosen_total += chosen;  // in pick order, as the CPU sums them
    if (lane == j) {
      my_expert = best_expert;
      my_prob = chosen;
    }
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (lane + i * kWarpSize == best_expert) score[i] = -INFINITY;
  }
  if (lane < top_k) {
    expert_ids[token * top_k + lane] = my_expert;
    weights[token * top_k + lane] = (normalize ? my_prob / chosen_total : my_prob) * limit.scaling;
  }
}

template <int kSlots>
__global__ void router_topk_backward_kernel(const float* __restrict__ logits, const int32_t* __restrict__ expert_ids,
                                            const float* __restrict__ weights, const float* __restrict__ dweights,
                                            int64_t tokens, int experts, int top_k, bool normalize, float scaling,
                                            float* __restrict__ dlogits) {
  gpu::wait_for_previous_kernel();
  const int64_t token = global_warp();
  if (token >= tokens) return;
  const int lane = lane_id();
  float prob[kSlots];
  softmax_row<kSlots>(logits + token * experts, experts, lane, prob);

  // Lane j < k holds choice j. An out-of-range expert id matches no slot, so it reads and writes nothing.
  const bool holds_choice = lane < top_k;
  const int expert = holds_choice ? expert_ids[token * top_k + lane] : -1;
  const float weight = holds_choice ? weights[token * top_k + lane] : 0.0f;
  const float dweight = holds_choice ? dweights[token * top_k + lane] : 0.0f;
  float chosen_prob = 0.0f;  // p[expert], fetched from the lane that owns it
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const float owned = __shfl_sync(kFullWarp, prob[i], expert & (kWarpSize - 1));
    if (expert >= 0 && expert / kWarpSize == i && expert < experts) chosen_prob = owned;
  }

  float dprob = scaling * dweight;  // d loss / d p[expert]
  if (normalize) {
    // w_j = s · p_j / S with S = Σ p over the chosen: dp_j = (s · dw_j − Σ_i dw_i w_i) / S.
    const float chosen_total = warp_sum(chosen_prob);
    const float weighted = warp_sum(dweight * weight);
    dprob = holds_choice ? (scaling * dweight - weighted) / chosen_total : 0.0f;
  }
  // Softmax backward: dl = p ⊙ (dp − ⟨p, dp⟩), with dp zero off the chosen experts.
  const float dot = warp_sum(chosen_prob * dprob);
  float dprob_slot[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) dprob_slot[i] = 0.0f;
  for (int j = 0; j < top_k; ++j) {
    const int chosen = __shfl_sync(kFullWarp, expert, j);
    const float chosen_dprob = __shfl_sync(kFullWarp, dprob, j);
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (lane + i * kWarpSize == chosen) dprob_slot[i] = chosen_dprob;
  }
  float* row = dlogits + token * experts;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    if (e < experts) row[e] = prob[i] * (dprob_slot[i] - dot);
  }
}

bool valid_shape(int64_t tokens, int experts, int top_k) {
  return tokens >= 0 && top_k >= 1 && top_k <= kRouterMaxTopK && top_k <= experts &&
         routing::softmax_slots(experts) > 0 && (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock <= INT_MAX;
}

bool valid_limit(int experts, int top_k, SoftmaxGroupLimit limit) {
  return limit.groups >= 1 && limit.groups <= kRouterMaxGroups && experts % limit.groups == 0 &&
         limit.topk_groups >= 1 && limit.topk_groups <= limit.groups &&
         top_k <= limit.topk_groups * (experts / limit.groups);
}

unsigned blocks_for(int64_t tokens) { return unsigned((tokens + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

cudaError_t launch_router_topk_forward(const float* logits, int64_t tokens, int experts, int top_k, bool normalize,
                                       SoftmaxGroupLimit limit, int32_t* expert_ids, float* weights,
                                       cudaStream_t stream) {
  if (!valid_shape(tokens, experts, top_k) || !valid_limit(experts, top_k, limit)) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  const dim3 grid{blocks_for(tokens)}, block{kWarpsPerBlock * kWarpSize};
  const auto launch = [&](auto kernel) {
    gpu::launch_dependent(kernel, grid, block, 0, stream, logits, tokens, experts, top_k, normalize, limit, expert_ids,
                          weights);
  };
  return routing::launch_with_slots(experts,
                                    [&](auto slots) { launch(router_topk_forward_kernel<decltype(slots)::value>); });
}

cudaError_t launch_router_topk_backward(const float* logits, const int32_t* expert_ids, const float* weights,
                                        const float* dweights, int64_t tokens, int experts, int top_k, bool normalize,
                                        float scaling, float* dlogits, cudaStream_t stream) {
  if (!valid_shape(tokens, experts, top_k)) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  const dim3 grid{blocks_for(tokens)}, block{kWarpsPerBlock * kWarpSize};
  const auto launch = [&](auto kernel) {
    gpu::launch_dependent(kernel, grid, block, 0, stream, logits, expert_ids, weights, dweights, tokens, experts, top_k,
                          normalize, scaling, dlogits);
  };
  return routing::launch_with_slots(experts,
                                    [&](auto slots) { launch(router_topk_backward_kernel<decltype(slots)::value>); });
}

}  // namespace moetune::ops::cuda
