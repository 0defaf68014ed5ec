// The router's softmax for one token, held in one warp's registers: lane l owns experts l, l + 32, l + 64, ...
// (kSlots of them, kSlots = ceil(E / 32) rounded up to a power of two, E ≤ kRouterMaxExperts = 512). Shared by the
// top-k kernels and the aux-loss kernels so that both see the same probabilities, computed the way the CPU reference
// does: exp(logit − max), then divided by the sum (a true division, not a reciprocal, to stay close to it).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "moetune/ops/router_limits.h"

namespace moetune::ops::cuda::routing {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kMaxExperts = ops::kRouterMaxExperts;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) % kWarpSize; }

// The token a warp works on: warps are numbered across the grid.
__device__ __forceinline__ int64_t global_warp() {
  return int64_t(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
}

// The CPU references' order of (value, expert) candidates: the higher value, then the lower expert index.
__device__ __forceinline__ bool ranks_above(float value, int expert, float other_value, int other_expert) {
  return value > other_value || (value == other_value && expert < other_expert);
}

// The warp's best candidate over every lane's slots (lane l's slot i is expert l + 32 i, -inf where none): each
// lane's best slot, then a butterfly reduction, so that every lane gets the same (value, expert).
template <int kSlots>
__device__ __forceinline__ void warp_best(const float (&values)[kSlots], int lane, float& best, int& best_expert) {
  best = -INFINITY;
  best_expert = INT_MAX;
#pragma unroll
  for (int i = 0; i < kSlots; ++i)
    if (values[i] > best) {  // slots ascend in expert index: '>' keeps the lower index among a lane's equals
      best = values[i];
      best_expert = lane + i * kWarpSize;
    }
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullWarp, best, offset);
    const int other_expert = __shfl_xor_sync(kFullWarp, best_expert, offset);
    if (ranks_above(other, other_expert, best, best_expert)) {
      best = other;
      best_expert = other_expert;
    }
  }
}

// Group-limited routing's mask (DeepSeek-V2's group_limited_greedy, V3's noaux_tc): lane g < groups holds group
// g's score; every slot whose expert lies outside the topk_groups best groups (ties to the lower group), and every
// padding slot, is set to -inf so that no pick takes it. With every group kept only the padding is masked.
template <int kSlots>
__device__ __forceinline__ void keep_best_groups(float group_score, int lane, int experts, int groups, int topk_groups,
                                                 float (&values)[kSlots]) {
  const bool every_group_kept = topk_groups >= groups;
  int rank = 0;
  if (!every_group_kept)
    for (int g = 0; g < groups; ++g) {
      const float other = __shfl_sync(kFullWarp, group_score, g);
      if (g != lane && ranks_above(other, g, group_score, lane)) ++rank;
    }
  const bool group_kept = lane < groups && (every_group_kept || rank < topk_groups);
  const int group_size = experts / groups;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    const bool kept = __shfl_sync(kFullWarp, group_kept, e < experts ? e / group_size : 0);
    if (e >= experts || !kept) values[i] = -INFINITY;
  }
}

// Slots past the last expert hold probability 0, so sums over the slots need no bounds test.
template <int kSlots>
__device__ __forceinline__ void softmax_row(const float* __restrict__ logits, int experts, int lane,
                                            float (&prob)[kSlots]) {
  float row_max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    prob[i] = e < experts ? logits[e] : -INFINITY;
    row_max = fmaxf(row_max, prob[i]);
  }
  row_max = warp_max(row_max);
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    prob[i] = lane + i * kWarpSize < experts ? expf(prob[i] - row_max) : 0.0f;
    total += prob[i];
  }
  total = warp_sum(total);
#pragma unroll
  for (int i = 0; i < kSlots; ++i) prob[i] = prob[i] / total;
}

// Register slots per lane for E experts: 1, 2, 4, 8 or 16 (0 when E is out of range), so that only five
// instantiations of each kernel exist.
inline int softmax_slots(int experts) {
  if (experts < 1 || experts > kMaxExperts) return 0;
  int slots = 1;
  while (slots * kWarpSize < experts) slots *= 2;
  return slots;
}

// Calls launch(std::integral_constant<int, S>) with S = softmax_slots(experts), so that one dispatch serves every
// kernel templated on its slots: `launch` picks its kernel<decltype(s)::value> and launches it. The slot counts
// tried (1, 2, 4, ... up to kMaxExperts / 32) follow kMaxExperts. Returns the launch's error, or
// cudaErrorInvalidValue for an expert count past the kernels.
template <int kSlots = 1, typename Launch>
cudaError_t launch_with_slots(int experts, Launch&& launch) {
  if (softmax_slots(experts) == kSlots) {
    launch(std::integral_constant<int, kSlots>{});
    return cudaGetLastError();
  }
  if constexpr (kSlots * kWarpSize < kMaxExperts) {
    return launch_with_slots<kSlots * 2>(experts, launch);
  } else {
    return cudaErrorInvalidValue;
  }
}

}  // namespace moetune::ops::cuda::routing
