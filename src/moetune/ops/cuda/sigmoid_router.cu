// The sigmoid group-limited router, one warp per token: lane l holds experts l, l + 32, ... in registers (as the
// softmax router does, router_softmax.cuh). Group scores need a group's experts together, so the biased scores
// also go through the warp's slice of shared memory, where lane g sums group g's two best. The backward pass
// recomputes the sigmoid of the chosen experts instead of storing it.
#include <climits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/router_softmax.cuh"
#include "moetune/ops/cuda/sigmoid_router_kernels.h"

namespace moetune::ops::cuda {
namespace {

using namespace routing;

constexpr int kWarpsPerBlock = 8;

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <int kSlots>
__global__ void sigmoid_router_forward_kernel(const float* __restrict__ logits, const float* __restrict__ bias,
                                              SigmoidRouterShape s, int32_t* __restrict__ expert_ids,
                                              float* __restrict__ weights) {
  gpu::wait_for_previous_kernel();
  __shared__ float choice_rows[kWarpsPerBlock][kMaxExperts];
  const int64_t token = global_warp();
  if (token >= s.tokens) return;  // uniform across the warp
  const int lane = lane_id();
  float* choice_row = choice_rows[threadIdx.x / kWarpSize];
  const float* row = logits + token * s.experts;
  float score[kSlots], choice[kSlots];
  const bool every_group_kept = s.topk_groups == s.num_groups;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    score[i] = e < s.experts ? sigmoid(row[e]) : 0.0f;
    choice[i] = score[i] + (bias != nullptr && e < s.experts ? bias[e] : 0.0f);
    if (e < s.experts && !every_group_kept) choice_row[e] = choice[i];
  }
  __syncwarp();

  // Lane g < num_groups: group g's score (its two best biased scores), which keep_best_groups ranks; skipped
  // where every group is kept (one group, as in Moonlight and Kimi-K2: one lane would scan all 384 experts).
  const int group_size = s.experts / s.num_groups;
  float group_score = -INFINITY;
  if (lane < s.num_groups && !every_group_kept) {
    float first = -INFINITY, second = -INFINITY;
    for (int e = lane * group_size; e < (lane + 1) * group_size; ++e) {
      const float v = choice_row[e];
      if (v > first) {
        second = first;
        first = v;
      } else if (v > second) {
        second = v;
      }
    }
    group_score = first + second;
  }
  keep_best_groups(group_score, lane, s.experts, s.num_groups, s.topk_groups, choice);

  int my_expert = 0;  // lane j keeps pick j
  float my_score = 0.0f, chosen_total = 0.0f;
  for (int j = 0; j < s.top_k; ++j) {
    float best;
    int best_expert;
    warp_best(choice, lane, best, best_expert);
    // best_expert is the same in every lane; its owner hands over the unbiased score.
    float owned = 0.0f;
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (best_expert / kWarpSize == i) owned = score[i];
    const float chosen_score = __shfl_sync(kFullWarp, owned, best_expert & (kWarpSize - 1));
    chosen_total += chosen_score;  // in pick order, as the CPU sums them
    if (lane == j) {
      my_expert = best_expert;
      my_score = chosen_score;
    }
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (lane + i * kWarpSize == best_expert) choice[i] = -INFINITY;
  }
  if (lane < s.top_k) {
    expert_ids[token * s.top_k + lane] = my_expert;
    const float w = s.renormalize ? my_score / (chosen_total + 1e-20f) : my_score;
    weights[token * s.top_k + lane] = w * s.scaling;
  }
}

template <int kSlots>
__global__ void sigmoid_router_backward_kernel(const float* __restrict__ logits, const int32_t* __restrict__ expert_ids,
                                               const float* __restrict__ dweights, SigmoidRouterShape s,
                                               float* __restrict__ dlogits) {
  gpu::wait_for_previous_kernel();
  const int64_t token = global_warp();
  if (token >= s.tokens) return;
  const int lane = lane_id();
  const float* row = logits + token * s.experts;
  // Lane j < k holds choice j.
  const bool holds_choice = lane < s.top_k;
  const int expert = holds_choice ? expert_ids[token * s.top_k + lane] : -1;
  const bool valid = expert >= 0 && expert < s.experts;
  const float score = valid ? sigmoid(row[expert]) : 0.0f;
  const float dweight = holds_choice ? dweights[token * s.top_k + lane] : 0.0f;
  float dscore = s.scaling * dweight;
  if (s.renormalize) {
    // w_j = c · s_j / D with D = Σ s + 1e-20: ds_j = c · (dw_j − Σ_i dw_i s_i / D) / D.
    const float denominator = warp_sum(score) + 1e-20f;
    const float weighted = warp_sum(dweight * score);
    dscore = s.scaling * (dweight - weighted / denominator) / denominator;
  }
  const float dlogit = valid ? dscore * score * (1.0f - score) : 0.0f;
  float slot[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) slot[i] = 0.0f;
  for (int j = 0; j < s.top_k; ++j) {
    const int chosen = __shfl_sync(kFullWarp, expert, j);
    const float value = __shfl_sync(kFullWarp, dlogit, j);
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (lane + i * kWarpSize == chosen) slot[i] = value;
  }
  float* out = dlogits + token * s.experts;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    if (e < s.experts) out[e] = slot[i];
  }
}

bool valid_shape(const SigmoidRouterShape& s) {
  return s.tokens >= 0 && softmax_slots(s.experts) > 0 && s.num_groups >= 1 && s.num_groups <= kRouterMaxGroups &&
         s.experts % s.num_groups == 0 && s.experts / s.num_groups >= 2 && s.topk_groups >= 1 &&
         s.topk_groups <= s.num_groups && s.top_k >= 1 && s.top_k <= 16 &&
         s.top_k <= s.topk_groups * (s.experts / s.num_groups) &&
         (s.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock <= INT_MAX;
}

unsigned blocks_for(int64_t tokens) { return unsigned((tokens + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

cudaError_t launch_sigmoid_router_forward(const float* logits, const float* correction_bias, SigmoidRouterShape shape,
                                          int32_t* expert_ids, float* weights, cudaStream_t stream) {
  if (!valid_shape(shape)) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  const dim3 grid{blocks_for(shape.tokens)}, block{kWarpsPerBlock * kWarpSize};
  const auto launch = [&](auto kernel) {
    gpu::launch_dependent(kernel, grid, block, 0, stream, logits, correction_bias, shape, expert_ids, weights);
  };
  return launch_with_slots(shape.experts,
                           [&](auto slots) { launch(sigmoid_router_forward_kernel<decltype(slots)::value>); });
}

cudaError_t launch_sigmoid_router_backward(const float* logits, const int32_t* expert_ids, const float* dweights,
                                           SigmoidRouterShape shape, float* dlogits, cudaStream_t stream) {
  if (!valid_shape(shape)) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  const dim3 grid{blocks_for(shape.tokens)}, block{kWarpsPerBlock * kWarpSize};
  const auto launch = [&](auto kernel) {
    gpu::launch_dependent(kernel, grid, block, 0, stream, logits, expert_ids, dweights, shape, dlogits);
  };
  return launch_with_slots(shape.experts,
                           [&](auto slots) { launch(sigmoid_router_backward_kernel<decltype(slots)::value>); });
}

}  // namespace moetune::ops::cuda
