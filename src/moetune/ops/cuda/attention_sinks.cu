// Attention sinks around flash attention (attention_sinks.h). Forward: one warp per (token, head) row rescales the
// row and rewrites its statistic. Backward: one block per head walks every token in a fixed order (each warp a
// fixed set of tokens, then a fixed-order sum over warps), so the sink gradient is deterministic.
#include <cuda_bf16.h>

#include <climits>
#include <type_traits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/attention_sinks_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;

using pointwise::from_float;
using pointwise::to_float;
using pointwise::warp_sum;

template <typename Sink>
__global__ void sinks_forward_kernel(const Sink* __restrict__ sinks, __nv_bfloat16* __restrict__ out,
                                     float* __restrict__ stats, int64_t rows, int heads, int head_dim) {
  gpu::wait_for_previous_kernel();
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;  // (token, head)
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarp;
  const float lse = stats[row], sink = to_float(sinks[row % heads]);
  // σ(L − s) and logaddexp(L, s), written so that neither overflows.
  const float keep = 1.0f / (1.0f + expf(sink - lse));
  __nv_bfloat16* o = out + row * head_dim;
  for (int i = lane; i < head_dim; i += kWarp) o[i] = __float2bfloat16_rn(__bfloat162float(o[i]) * keep);
  if (lane == 0) stats[row] = fmaxf(lse, sink) + log1pf(expf(-fabsf(lse - sink)));
}

template <typename Sink, typename Grad>
__global__ void sinks_backward_kernel(const Sink* __restrict__ sinks, const __nv_bfloat16* __restrict__ dout,
                                      const __nv_bfloat16* __restrict__ out, const float* __restrict__ stats,
                                      int64_t tokens, int heads, int head_dim, Grad* __restrict__ dsinks) {
  gpu::wait_for_previous_kernel();
  __shared__ float partial[kWarpsPerBlock];
  const int head = blockIdx.x, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const float sink = to_float(sinks[head]);
  float sum = 0.0f;  // meaningful in lane 0
  for (int64_t t = warp; t < tokens; t += kWarpsPerBlock) {
    const int64_t row = t * heads + head;
    float dot = 0.0f;
    for (int i = lane; i < head_dim; i += kWarp)
      dot += __bfloat162float(dout[row * head_dim + i]) * __bfloat162float(out[row * head_dim + i]);
    dot = warp_sum(dot);
    sum -= expf(sink - stats[row]) * dot;
  }
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kWarpsPerBlock; ++w) total += partial[w];
    dsinks[head] = from_float<Grad>(to_float(dsinks[head]) + total);
  }
}

}  // namespace

cudaError_t launch_attention_sinks_forward(const void* sinks, bool sinks_bf16, void* out, float* stats, int64_t tokens,
                                           int heads, int head_dim, cudaStream_t stream) {
  const int64_t rows = tokens * heads;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT_MAX) return cudaErrorInvalidValue;
  auto* o = static_cast<__nv_bfloat16*>(out);
  if (sinks_bf16)
    gpu::launch_dependent(sinks_forward_kernel<__nv_bfloat16>, unsigned(blocks), kWarpsPerBlock * kWarp, 0, stream,
                          static_cast<const __nv_bfloat16*>(sinks), o, stats, rows, heads, head_dim);
  else
    gpu::launch_dependent(sinks_forward_kernel<float>, unsigned(blocks), kWarpsPerBlock * kWarp, 0, stream,
                          static_cast<const float*>(sinks), o, stats, rows, heads, head_dim);
  return cudaGetLastError();
}

cudaError_t launch_attention_sinks_backward(const void* sinks, bool sinks_bf16, const void* dout, const void* out,
                                            const float* stats, int64_t tokens, int heads, int head_dim, void* dsinks,
                                            bool dsinks_bf16, cudaStream_t stream) {
  if (tokens == 0 || heads == 0) return cudaSuccess;
  const auto* d = static_cast<const __nv_bfloat16*>(dout);
  const auto* o = static_cast<const __nv_bfloat16*>(out);
  const auto launch = [&](auto* typed_sinks, auto* typed_grad) {
    using Sink = std::remove_cv_t<std::remove_pointer_t<decltype(typed_sinks)>>;
    using Grad = std::remove_pointer_t<decltype(typed_grad)>;
    gpu::launch_dependent(sinks_backward_kernel<Sink, Grad>, unsigned(heads), kWarpsPerBlock * kWarp, 0, stream,
                          typed_sinks, d, o, stats, tokens, heads, head_dim, typed_grad);
  };
  const auto* s_bf16 = static_cast<const __nv_bfloat16*>(sinks);
  const auto* s_f32 = static_cast<const float*>(sinks);
  auto* g_bf16 = static_cast<__nv_bfloat16*>(dsinks);
  auto* g_f32 = static_cast<float*>(dsinks);
  if (sinks_bf16)
    dsinks_bf16 ? launch(s_bf16, g_bf16) : launch(s_bf16, g_f32);
  else
    dsinks_bf16 ? launch(s_f32, g_bf16) : launch(s_f32, g_f32);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
