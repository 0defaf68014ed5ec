// The Switch-style load-balancing loss of transformers' load_balancing_loss_func, split so that no value has to
// come back to the host: each layer's forward adds its top-k counts and probability sums into two device
// accumulators, the loss is read off them once per step, and each layer's backward uses the final counts.
#include <climits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/aux_loss_kernels.h"
#include "moetune/ops/cuda/router_softmax.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace routing;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * kWarpSize;
// Enough blocks to fill an H200 twice over; more would only add global atomics.
constexpr int64_t kMaxAccumulateBlocks = 264;

__device__ __forceinline__ bool counted(const uint8_t* token_valid, int64_t token) {
  return token_valid == nullptr || token_valid[token] != 0;
}

// Each block sums its tokens in shared memory first, then adds to the global accumulators once per expert.
template <int kSlots>
__global__ void aux_loss_accumulate_kernel(const float* __restrict__ logits, const int32_t* __restrict__ expert_ids,
                                           const uint8_t* __restrict__ token_valid, int64_t tokens, int experts,
                                           int top_k, float* __restrict__ counts, float* __restrict__ prob_sums) {
  gpu::wait_for_previous_kernel();
  __shared__ int block_counts[kMaxExperts];
  __shared__ float block_probs[kMaxExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    block_counts[e] = 0;
    block_probs[e] = 0.0f;
  }
  __syncthreads();
  const int lane = lane_id();
  const int64_t warps = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t token = global_warp(); token < tokens; token += warps) {
    if (!counted(token_valid, token)) continue;  // uniform across the warp
    float prob[kSlots];
    softmax_row<kSlots>(logits + token * experts, experts, lane, prob);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int e = lane + i * kWarpSize;
      if (e < experts) atomicAdd(&block_probs[e], prob[i]);
    }
    if (lane < top_k) {
      const int expert = expert_ids[token * top_k + lane];
      if (expert >= 0 && expert < experts) atomicAdd(&block_counts[expert], 1);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    if (block_counts[e] != 0) atomicAdd(&counts[e], float(block_counts[e]));
    if (block_probs[e] != 0.0f) atomicAdd(&prob_sums[e], block_probs[e]);
  }
}

// One block: the Σ_e C_e · P_e dot product in double, as the CPU reference sums it.
__global__ void aux_loss_value_kernel(const float* __restrict__ counts, const float* __restrict__ prob_sums,
                                      int experts, double rows, float* __restrict__ loss) {
  gpu::wait_for_previous_kernel();
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) sum += double(counts[e]) * double(prob_sums[e]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = rows > 0 ? float(partial[0] * double(experts) / (rows * rows)) : 0.0f;
}

// One warp per token: d loss / d p[t, e] = g_e for every counted row, then through the row's softmax.
template <int kSlots>
__global__ void aux_loss_backward_kernel(const float* __restrict__ logits, const uint8_t* __restrict__ token_valid,
                                         const float* __restrict__ counts, int64_t tokens, int experts,
                                         double gradient_per_count, float* __restrict__ dlogits) {
  gpu::wait_for_previous_kernel();
  const int64_t token = global_warp();
  if (token >= tokens || !counted(token_valid, token)) return;  // uniform across the warp
  const int lane = lane_id();
  float prob[kSlots], dprob[kSlots];
  softmax_row<kSlots>(logits + token * experts, experts, lane, prob);
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    // The CPU reference rounds g_e from double to float the same way.
    dprob[i] = e < experts ? float(gradient_per_count * double(counts[e])) : 0.0f;
    dot += prob[i] * dprob[i];
  }
  dot = warp_sum(dot);
  float* row = dlogits + token * experts;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarpSize;
    if (e < experts) row[e] += prob[i] * (dprob[i] - dot);
  }
}

}  // namespace

cudaError_t launch_aux_loss_accumulate(const float* logits, const int32_t* expert_ids, const uint8_t* token_valid,
                                       int64_t tokens, int experts, int top_k, float* counts, float* prob_sums,
                                       cudaStream_t stream) {
  if (tokens < 0 || top_k < 1 || top_k > experts || top_k > kWarpSize) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  const int64_t wanted = (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const dim3 grid{unsigned(wanted < kMaxAccumulateBlocks ? wanted : kMaxAccumulateBlocks)}, block{kThreads};
  const auto launch = [&](auto kernel) {
    gpu::launch_dependent(kernel, grid, block, 0, stream, logits, expert_ids, token_valid, tokens, experts, top_k,
                          counts, prob_sums);
  };
  return launch_with_slots(experts, [&](auto slots) { launch(aux_loss_accumulate_kernel<decltype(slots)::value>); });
}

cudaError_t launch_aux_loss_value(const float* counts, const float* prob_sums, int experts, double rows, float* loss,
                                  cudaStream_t stream) {
  if (experts < 1 || rows < 0) return cudaErrorInvalidValue;
  gpu::launch_dependent(aux_loss_value_kernel, 1, kThreads, 0, stream, counts, prob_sums, experts, rows, loss);
  return cudaGetLastError();
}

cudaError_t launch_aux_loss_backward(const float* logits, const uint8_t* token_valid, const float* counts,
                                     int64_t tokens, int experts, double rows, double scale, float* dlogits,
                                     cudaStream_t stream) {
  if (tokens < 0 || rows < 0) return cudaErrorInvalidValue;
  if (tokens == 0 || rows == 0) return cudaSuccess;  // the CPU reference adds nothing without counted rows
  const int64_t blocks = (tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT_MAX) return cudaErrorInvalidValue;
  const dim3 grid{unsigned(blocks)}, block{kThreads};
  const double gradient_per_count = scale * double(experts) / (rows * rows);
  const auto launch = [&](auto kernel) {
    gpu::launch_dependent(kernel, grid, block, 0, stream, logits, token_valid, counts, tokens, experts,
                          gradient_per_count, dlogits);
  };
  return launch_with_slots(experts, [&](auto slots) { launch(aux_loss_backward_kernel<decltype(slots)::value>); });
}

}  // namespace moetune::ops::cuda
