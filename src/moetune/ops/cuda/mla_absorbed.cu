// The two products that fold kv_b into decoding's q and output (ops/cuda/mla_absorbed.h), on CUDA cores: at a few
// tokens they read kv_b's weight once (2 MB a layer on DeepSeek-V3's widths) and their arithmetic is small. Each
// output is rounded to bf16 once, as a GEMM writes it.
#include <cstdint>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/mla_absorbed_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kThreads = 256;
constexpr int kMaxNope = 256;

// Block (row, column tile): each thread one latent column c, Σ_i q_nope[i] · W_uk[i, c] down the rows of the head's
// W_uk (adjacent threads read adjacent columns of a row). The first tile also copies the rotated rope part.
__global__ void __launch_bounds__(kThreads) absorb_q_kernel(const bf16* __restrict__ q, const bf16* __restrict__ kv_b,
                                                            bf16* __restrict__ q_abs, MlaAbsorbedShape s) {
  gpu::wait_for_previous_kernel();
  __shared__ float q_nope[kMaxNope];
  const int64_t row = blockIdx.x;
  const int head = int(row % s.heads);
  const bf16* q_row = q + row * s.q_width;
  for (int i = threadIdx.x; i < s.nope; i += kThreads) q_nope[i] = to_float(q_row[i]);
  __syncthreads();
  bf16* out = q_abs + row * (s.latent + s.rope);
  const int c = int(blockIdx.y) * kThreads + int(threadIdx.x);
  if (c < s.latent) {
    const bf16* w = kv_b + int64_t(head) * (s.nope + s.v_dim) * s.latent + c;
    float sum = 0.0f;
    for (int i = 0; i < s.nope; ++i) sum += q_nope[i] * to_float(w[int64_t(i) * s.latent]);
    out[c] = from_float<bf16>(sum);
  }
  if (blockIdx.y == 0)
    for (int r = threadIdx.x; r < s.rope; r += kThreads) out[s.latent + r] = q_row[s.nope + r];
}

// One warp per output column j of a (token, head): the lanes split the latent, 8 elements a load where aligned.
constexpr int kWarpsPerBlock = 8;

template <int kVec>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    absorb_out_kernel(const bf16* __restrict__ o_latent, const bf16* __restrict__ kv_b, bf16* __restrict__ attended,
                      MlaAbsorbedShape s) {
  gpu::wait_for_previous_kernel();
  const int lane = int(threadIdx.x) & 31;
  const int64_t row = blockIdx.x;
  const int j = int(blockIdx.y) * kWarpsPerBlock + int(threadIdx.x >> 5);
  if (j >= s.out_width) return;
  bf16* out = attended + row * s.out_width;
  if (j >= s.v_dim) {
    if (lane == 0) out[j] = from_float<bf16>(0.0f);
    return;
  }
  const int head = int(row % s.heads);
  const bf16* w = kv_b + (int64_t(head) * (s.nope + s.v_dim) + s.nope + j) * s.latent;
  const bf16* o = o_latent + row * s.latent;
  float sum = 0.0f;
  for (int c = lane * kVec; c < s.latent; c += 32 * kVec) {
    float x[kVec], y[kVec];
    load<kVec>(w + c, x);
    load<kVec>(o + c, y);
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum += x[e] * y[e];
  }
  sum = warp_sum(sum);
  if (lane == 0) out[j] = from_float<bf16>(sum);
}

}  // namespace

cudaError_t launch_mla_absorb_q(const void* q, const void* kv_b, void* q_abs, const MlaAbsorbedShape& s,
                                cudaStream_t stream) {
  if (s.rows == 0) return cudaSuccess;
  if (s.nope > kMaxNope) return cudaErrorInvalidValue;
  const dim3 grid(unsigned(s.rows), unsigned((s.latent + kThreads - 1) / kThreads));
  gpu::launch_dependent(absorb_q_kernel, grid, kThreads, 0, stream, static_cast<const bf16*>(q),
                        static_cast<const bf16*>(kv_b), static_cast<bf16*>(q_abs), s);
  return cudaGetLastError();
}

cudaError_t launch_mla_absorb_out(const void* o_latent, const void* kv_b, void* attended, const MlaAbsorbedShape& s,
                                  cudaStream_t stream) {
  if (s.rows == 0) return cudaSuccess;
  const dim3 grid(unsigned(s.rows), unsigned((s.out_width + kWarpsPerBlock - 1) / kWarpsPerBlock));
  const bool vector = s.latent % 8 == 0 && reinterpret_cast<uintptr_t>(o_latent) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(kv_b) % 16 == 0;
  gpu::launch_dependent(vector ? absorb_out_kernel<8> : absorb_out_kernel<1>, grid, kWarpsPerBlock * 32, 0, stream,
                        static_cast<const bf16*>(o_latent), static_cast<const bf16*>(kv_b),
                        static_cast<bf16*>(attended), s);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
