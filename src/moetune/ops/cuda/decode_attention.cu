// Split-K decode attention. Pass 1: block (split, head, query) runs an online softmax over the keys of its chunk
// that the query sees, one key per warp at a time (the lanes split the head widths, lane + 32·e), then merges its warps
// into one running max, sum of exponentials and fp32 output row. Pass 2: one block per (head, query) merges the
// splits (and the head's sink logit, if any) and normalises.
#include <cmath>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/decode_attention_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kWarps = 4;

// kPerLane: head-width elements a lane holds (widths up to 32·kPerLane): 8 for attention heads, 18 for latent MLA.
template <int kPerLane>
__global__ void __launch_bounds__(kWarps * 32)
    decode_attention_split_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                                  float* __restrict__ partial_out, float* __restrict__ partial_stats,
                                  DecodeAttentionShape s, float scale) {
  gpu::wait_for_previous_kernel();
  const int64_t split = blockIdx.x, head = blockIdx.y, query = blockIdx.z;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int d = int(s.head_dim), dv = int(s.v_head_dim);
  const int64_t kv_head = head / (s.heads / s.kv_heads);
  // This split reads the keys of its own chunk that the query sees: the chunk cut to [its first visible key, its own
  // key]. Empty (split_begin ≥ split_end) for a chunk past the query or wholly before its window: it adds nothing.
  const int64_t chunk_begin = (s.first_split + split) * kDecodeKeysPerSplit;
  const int64_t chunk_end = chunk_begin + kDecodeKeysPerSplit;
  const int64_t first_visible = decode_first_visible_key(s, query), visible_end = s.keys - s.queries + query + 1;
  const int64_t split_begin = chunk_begin > first_visible ? chunk_begin : first_visible;
  const int64_t split_end = chunk_end < visible_end ? chunk_end : visible_end;

  float q_lane[kPerLane], acc[kPerLane];
  const bf16* q_row = q + (query * s.heads + head) * d;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int i = lane + 32 * e;
    q_lane[e] = i < d ? to_float(q_row[i]) * scale : 0.0f;
    acc[e] = 0.0f;
  }
  float running_max = -INFINITY, running_sum = 0.0f;
  for (int64_t j = split_begin + warp; j < split_end; j += kWarps) {
    const int64_t row = j * s.kv_heads + kv_head;
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e)
      if (lane + 32 * e < d) dot += q_lane[e] * to_float(k[row * d + lane + 32 * e]);
    dot = warp_sum(dot);
    const float new_max = fmaxf(running_max, dot);
    const float rescale = expf(running_max - new_max), p = expf(dot - new_max);
    running_sum = running_sum * rescale + p;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e)
      if (lane + 32 * e < dv) acc[e] = acc[e] * rescale + p * to_float(v[row * s.v_row_stride + lane + 32 * e]);
    running_max = new_max;
  }

  __shared__ float warp_max[kWarps], warp_sum_exp[kWarps];
  __shared__ float warp_acc[kWarps][32 * kPerLane];
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum_exp[warp] = running_sum;
  }
#pragma unroll
  for (int e = 0; e < kPerLane; ++e)
    if (lane + 32 * e < dv) warp_acc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  float block_max = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) block_max = fmaxf(block_max, warp_max[w]);
  const int64_t slot = (query * s.heads + head) * s.splits + split;
  for (int i = int(threadIdx.x); i < dv; i += int(blockDim.x)) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      if (warp_max[w] != -INFINITY) total += warp_acc[w][i] * expf(warp_max[w] - block_max);
    partial_out[slot * dv + i] = total;
  }
  if (threadIdx.x == 0) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      if (warp_max[w] != -INFINITY) total += warp_sum_exp[w] * expf(warp_max[w] - block_max);
    partial_stats[slot * 2] = block_max;  // -inf for a split the query does not see
    partial_stats[slot * 2 + 1] = total;
  }
}

// Sink: float or bf16; sinks null when the heads have none. A sink logit joins the denominator alone (no value row).
template <typename Sink>
__global__ void decode_attention_merge_kernel(const float* __restrict__ partial_out,
                                              const float* __restrict__ partial_stats, const Sink* __restrict__ sinks,
                                              bf16* __restrict__ out, DecodeAttentionShape s) {
  gpu::wait_for_previous_kernel();
  const int64_t head = blockIdx.x, query = blockIdx.y, first = (query * s.heads + head) * s.splits;
  const int dv = int(s.v_head_dim);
  const float sink = sinks != nullptr ? to_float(sinks[head]) : -INFINITY;
  float overall_max = sink;
  for (int64_t split = 0; split < s.splits; ++split) overall_max = fmaxf(overall_max, partial_stats[(first + split) * 2]);
  // > 0: every query sees at least its own key
  float total = sinks != nullptr ? expf(sink - overall_max) : 0.0f;
  for (int64_t split = 0; split < s.splits; ++split) {
    const float m = partial_stats[(first + split) * 2];
    if (m != -INFINITY) total += partial_stats[(first + split) * 2 + 1] * expf(m - overall_max);
  }
  for (int i = int(threadIdx.x); i < dv; i += int(blockDim.x)) {
    float o = 0.0f;
    for (int64_t split = 0; split < s.splits; ++split) {
      const float m = partial_stats[(first + split) * 2];
      if (m != -INFINITY) o += partial_out[(first + split) * dv + i] * expf(m - overall_max);
    }
    out[(query * s.heads + head) * dv + i] = from_float<bf16>(o / total);
  }
}

}  // namespace

cudaError_t launch_decode_attention(const void* q, const void* k, const void* v, void* out, float* partial_out,
                                    float* partial_stats, const void* sinks, bool sinks_bf16,
                                    const DecodeAttentionShape& shape, float scale, cudaStream_t stream) {
  const dim3 split_grid(unsigned(shape.splits), unsigned(shape.heads), unsigned(shape.queries));
  const bool latent = shape.head_dim > kDecodeMaxHeadDim || shape.v_head_dim > kDecodeMaxHeadDim;
  constexpr int kHeadLanes = int(kDecodeMaxHeadDim / 32), kLatentLanes = int(kDecodeMaxLatentDim / 32);
  gpu::launch_dependent(
      latent ? decode_attention_split_kernel<kLatentLanes> : decode_attention_split_kernel<kHeadLanes>, split_grid,
      kWarps * 32, 0, stream, static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v),
      partial_out, partial_stats, shape, scale);
  const dim3 merge_grid(unsigned(shape.heads), unsigned(shape.queries));
  if (sinks_bf16)
    gpu::launch_dependent(decode_attention_merge_kernel<bf16>, merge_grid, 128, 0, stream, partial_out, partial_stats,
                          static_cast<const bf16*>(sinks), static_cast<bf16*>(out), shape);
  else
    gpu::launch_dependent(decode_attention_merge_kernel<float>, merge_grid, 128, 0, stream, partial_out, partial_stats,
                          static_cast<const float*>(sinks), static_cast<bf16*>(out), shape);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
