// MLA's q/k/v assembly where q's head width is q_proj's, one block per token and one launch per direction, for the
// rope widths the one-warp-per-token kernels (mla_qkv_warp.h: 16, 32, 64, which covers Moonlight, DeepSeek-V3 and
// Kimi-K2) do not take: q's rope columns rotated in place, k and v built from kv_b's output and
// the shared rope key (forward); dq's rope columns rotated back in place, dkv assembled and the rope key's
// gradient summed over the heads (backward).
//
// Why one block per token: everything that needs a sine or cosine in a token shares its rope/2 angles, so they
// are computed once (rope/2 sincosf, not heads × rope as the separate kernels did), and the rope columns that the
// rotation mixes (another lane's, or another head's for the key's gradient) are staged in shared memory once.
// The rest is 16-byte copies. The separate kernels ran at ~1 TB/s on Moonlight's shapes (0.16 ms for k/v plus
// 0.05 ms for q's rotation a layer, CUPTI, session 9); these bytes (~185 MB a layer each way) take ~0.05 ms at
// the H200's bandwidth.
//
// The arithmetic is the separate kernels' (mla_rotation.cuh), with the angles read from the table: the same bits.
#include <cstdint>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/mla_qkv_kernels.h"
#include "moetune/ops/cuda/mla_qkv_moves.cuh"
#include "moetune/ops/cuda/mla_qkv_paths.h"
#include "moetune/ops/cuda/mla_qkv_warp.h"
#include "moetune/ops/cuda/mla_rotation.cuh"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using mla_paths::kVec;
using mla_rotation::Rotation;
using pointwise::bf16;
using pointwise::to_float;

constexpr int kThreads = 256;
constexpr size_t kDefaultSharedBytes = 48 * 1024;  // above it the launch would need an opt-in: the caller falls back

// The token's rotations, filled by the block: cos at [pair], sin at [half + pair], as rotation() gives them.
struct RotationTable {
  const float* angles;
  int half;
  __device__ Rotation operator()(int pair) const { return {angles[pair], angles[half + pair]}; }
};

__device__ __forceinline__ void fill_rotations(float* angles, int32_t position, const float* inv_freq,
                                               const MlaQkvShape& s) {
  const int half = s.rope / 2;
  for (int pair = threadIdx.x; pair < half; pair += blockDim.x) {
    const Rotation r = mla_rotation::rotation(position, inv_freq, pair, s.scale);
    angles[pair] = r.cos;
    angles[half + pair] = r.sin;
  }
}

using mla_moves::load16;
using mla_moves::Move;
using mla_moves::store16;

// Shared memory: the rotation table (rope floats), then the staged bf16 columns.
__global__ void __launch_bounds__(kThreads)
    mla_qkv_forward_in_place_kernel(bf16* __restrict__ q, const bf16* __restrict__ kv, const bf16* __restrict__ k_rope,
                                    const float* __restrict__ inv_freq, const int32_t* __restrict__ positions,
                                    bf16* __restrict__ k, bf16* __restrict__ v, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  extern __shared__ __align__(16) unsigned char smem[];
  float* angles = reinterpret_cast<float*>(smem);
  bf16* q_rope = reinterpret_cast<bf16*>(angles + s.rope);  // [heads, rope]
  bf16* key_rope = q_rope + s.heads * s.rope;               // [rope]
  const int64_t t = blockIdx.x;
  const int dqk = s.nope + s.rope, dkv = s.nope + s.v_dim;
  bf16* q_token = q + t * s.heads * dqk;
  const bf16* kv_token = kv + t * s.heads * dkv;
  bf16* k_token = k + t * s.heads * s.qk_width;
  bf16* v_token = v != nullptr ? v + t * s.heads * s.v_width : nullptr;  // null: v is read from kv in place

  fill_rotations(angles, positions[t], inv_freq, s);
  // Staged: q's rope columns and the shared key. Copied: k's no-rope columns and v from kv, zeros past them (k's
  // rope columns come after the barrier).
  const int rope_chunks = s.rope / kVec, k_chunks = s.qk_width / kVec, v_chunks = s.v_width / kVec;
  const int nope_chunks = s.nope / kVec, rope_end = dqk / kVec, v_real = s.v_dim / kVec;
  const int staged = (s.heads + 1) * rope_chunks, k_moves = s.heads * k_chunks;
  mla_moves::run_moves(
      threadIdx.x, blockDim.x, staged + k_moves + (v_token != nullptr ? s.heads * v_chunks : 0), [&](int i) -> Move {
        if (i < staged) {
          const int h = i / rope_chunks, c0 = (i - h * rope_chunks) * kVec;
          if (h < s.heads) return {q_token + h * dqk + s.nope + c0, q_rope + h * s.rope + c0};
          return {k_rope + t * s.k_rope_stride + c0, key_rope + c0};
        }
        i -= staged;
        if (i < k_moves) {
          const int h = i / k_chunks, c = i - h * k_chunks;
          bf16* dst = k_token + h * s.qk_width + c * kVec;
          if (c < nope_chunks) return {kv_token + h * dkv + c * kVec, dst};
          return {nullptr, c >= rope_end ? dst : nullptr};
        }
        i -= k_moves;
        const int h = i / v_chunks, c = i - h * v_chunks;
        return {c < v_real ? kv_token + h * dkv + s.nope + c * kVec : nullptr, v_token + h * s.v_width + c * kVec};
      });
  __syncthreads();
  const RotationTable rot{angles, s.rope / 2};
  // q's rope columns rotated in place (all read before the barrier), and the shared key rotated into each head of k.
  for (int i = threadIdx.x; i < 2 * s.heads * rope_chunks; i += blockDim.x) {
    const bool key = i >= s.heads * rope_chunks;
    const int r = key ? i - s.heads * rope_chunks : i, h = r / rope_chunks, c0 = (r - h * rope_chunks) * kVec;
    const bf16* source = key ? key_rope : q_rope + h * s.rope;
    float out[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) out[j] = mla_rotation::rotated(source, c0 + j, s, rot);
    pointwise::store<kVec>(key ? k_token + h * s.qk_width + s.nope + c0 : q_token + h * dqk + s.nope + c0, out);
  }
}

struct StagedAt {  // dy_at for unrotated(): staged bf16 as fp32
  const bf16* x;
  __device__ float operator()(int i) const { return to_float(x[i]); }
};

struct HeadSumAt {  // dy_at for unrotated(): the staged rope-key gradients summed over the heads, in fp32, in order
  const bf16* x;
  int heads, rope;
  __device__ float operator()(int i) const {
    float total = 0.0f;
    for (int h = 0; h < heads; ++h) total += to_float(x[h * rope + i]);
    return total;
  }
};

__global__ void __launch_bounds__(kThreads)
    mla_qkv_backward_in_place_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dk, const bf16* __restrict__ dv,
                                     const float* __restrict__ inv_freq, const int32_t* __restrict__ positions,
                                     bf16* __restrict__ dkv, bf16* __restrict__ dk_rope, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  extern __shared__ __align__(16) unsigned char smem[];
  float* angles = reinterpret_cast<float*>(smem);
  bf16* dq_rope = reinterpret_cast<bf16*>(angles + s.rope);  // [heads, rope]
  bf16* dk_rope_heads = dq_rope + s.heads * s.rope;          // [heads, rope]
  const int64_t t = blockIdx.x;
  const int dqk = s.nope + s.rope, dkv_width = s.nope + s.v_dim;
  bf16* dq_token = dq + t * s.heads * dqk;
  const bf16* dk_token = dk + t * s.heads * s.qk_width;
  const bf16* dv_token = dv != nullptr ? dv + t * s.heads * s.v_width : nullptr;  // null: dv is dkv's already
  bf16* dkv_token = dkv + t * s.heads * dkv_width;

  fill_rotations(angles, positions[t], inv_freq, s);
  // Staged: dq's and dk's rope columns. Copied: dkv = [dk's no-rope columns | dv's real columns] per head. (Plain
  // loops here: run_moves took this kernel from 32 to 64 registers and from 0.083 to 0.101 ms on Moonlight's shapes,
  // where it took the forward kernel from 0.076 to 0.063; H200, session 10.)
  const int rope_chunks = s.rope / kVec, kv_chunks = dkv_width / kVec, nope_chunks = s.nope / kVec;
  for (int i = threadIdx.x; i < 2 * s.heads * rope_chunks; i += blockDim.x) {
    const int h = i / rope_chunks, c0 = (i - h * rope_chunks) * kVec;
    if (h < s.heads) store16(dq_rope + h * s.rope + c0, load16(dq_token + h * dqk + s.nope + c0));
    else store16(dk_rope_heads + (h - s.heads) * s.rope + c0, load16(dk_token + (h - s.heads) * s.qk_width + s.nope + c0));
  }
  const int chunks = dv_token != nullptr ? kv_chunks : nope_chunks;  // a head's columns to write
  for (int i = threadIdx.x; i < s.heads * chunks; i += blockDim.x) {
    const int h = i / chunks, c = i - h * chunks;
    store16(dkv_token + h * dkv_width + c * kVec,
            c < nope_chunks ? load16(dk_token + h * s.qk_width + c * kVec)
                            : load16(dv_token + h * s.v_width + (c - nope_chunks) * kVec));
  }
  __syncthreads();
  const RotationTable rot{angles, s.rope / 2};
  for (int i = threadIdx.x; i < (s.heads + 1) * rope_chunks; i += blockDim.x) {
    const int h = i / rope_chunks, j0 = (i - h * rope_chunks) * kVec;
    float out[kVec];
    if (h < s.heads) {  // dq's rope columns rotated back in place (all read before the barrier)
#pragma unroll
      for (int j = 0; j < kVec; ++j) out[j] = mla_rotation::unrotated(StagedAt{dq_rope + h * s.rope}, j0 + j, s, rot);
    } else {  // the shared key: Σ over heads, then the transpose of the rotation
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        out[j] = mla_rotation::unrotated(HeadSumAt{dk_rope_heads, s.heads, s.rope}, j0 + j, s, rot);
    }
    pointwise::store<kVec>(h < s.heads ? dq_token + h * dqk + s.nope + j0 : dk_rope + t * s.k_rope_stride + j0, out);
  }
}

// rope floats of angles, then `staged_rows` rows of rope bf16 columns.
size_t shared_bytes(const MlaQkvShape& s, int staged_rows) {
  return size_t(s.rope) * sizeof(float) + size_t(staged_rows) * size_t(s.rope) * sizeof(bf16);
}

bool in_place_path(const MlaQkvShape& s, size_t shared, std::initializer_list<const void*> tensors) {
  return s.qk_width == s.nope + s.rope && shared <= kDefaultSharedBytes && mla_paths::vector_path(s, tensors);
}

}  // namespace

cudaError_t launch_mla_qkv_forward_in_place(void* q, const void* kv, const void* k_rope, const float* inv_freq,
                                            const int32_t* positions, void* k, void* v, MlaQkvShape shape,
                                            cudaStream_t stream) {
  if (!mla_paths::valid(shape) || shape.qk_width != shape.nope + shape.rope) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  if (mla_qkv_warp_takes(shape, {q, kv, k_rope, k, v}))
    return launch_mla_qkv_forward_warp(q, kv, k_rope, inv_freq, positions, k, v, shape, stream);
  const size_t shared = shared_bytes(shape, shape.heads + 1);
  if (!in_place_path(shape, shared, {q, kv, k_rope, k, v})) {  // the separate kernels take every other shape
    if (v == nullptr) return cudaErrorInvalidValue;  // they build v: mla_v_read_in_place said no
    if (const cudaError_t status = launch_mla_q_rope_in_place(q, inv_freq, positions, shape, false, stream);
        status != cudaSuccess)
      return status;
    return launch_mla_qkv_forward(nullptr, kv, k_rope, inv_freq, positions, nullptr, k, v, shape, stream);
  }
  gpu::launch_dependent(mla_qkv_forward_in_place_kernel, unsigned(shape.tokens), kThreads, shared, stream,
                        static_cast<bf16*>(q), static_cast<const bf16*>(kv), static_cast<const bf16*>(k_rope), inv_freq,
                        positions, static_cast<bf16*>(k), static_cast<bf16*>(v), shape);
  return cudaGetLastError();
}

cudaError_t launch_mla_qkv_backward_in_place(void* dq, const void* dk, const void* dv, const float* inv_freq,
                                             const int32_t* positions, void* dkv, void* dk_rope, MlaQkvShape shape,
                                             cudaStream_t stream) {
  if (!mla_paths::valid(shape) || shape.qk_width != shape.nope + shape.rope) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  if (mla_qkv_warp_takes(shape, {dq, dk, dv, dkv, dk_rope}))
    return launch_mla_qkv_backward_warp(dq, dk, dv, inv_freq, positions, dkv, dk_rope, shape, stream);
  const size_t shared = shared_bytes(shape, 2 * shape.heads);
  if (!in_place_path(shape, shared, {dq, dk, dv, dkv, dk_rope})) {
    if (dv == nullptr) return cudaErrorInvalidValue;
    if (const cudaError_t status = launch_mla_q_rope_in_place(dq, inv_freq, positions, shape, true, stream);
        status != cudaSuccess)
      return status;
    return launch_mla_qkv_backward(nullptr, dk, dv, inv_freq, positions, nullptr, dkv, dk_rope, shape, stream);
  }
  gpu::launch_dependent(mla_qkv_backward_in_place_kernel, unsigned(shape.tokens), kThreads, shared, stream,
                        static_cast<bf16*>(dq), static_cast<const bf16*>(dk), static_cast<const bf16*>(dv), inv_freq,
                        positions, static_cast<bf16*>(dkv), static_cast<bf16*>(dk_rope), shape);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
