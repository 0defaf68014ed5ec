// MLA's in-place q/k/v assembly with one warp per token (mla_qkv_warp.h): no shared memory and no block barrier.
// The rope columns a rotation mixes come from the other lanes by shuffles, and each lane's cos/sin from the lane
// that computed that pair's angle (one sincosf a lane and token).
//
// Why: the block-per-token kernels (mla_qkv_in_place.cu) moved Moonlight's ~14 KB a token each way at 1.6-1.9 TB/s
// (62 / 75 µs a layer in the step, session 23's timeline, H200): a block loaded its token, waited at a barrier,
// then rotated from shared memory, so a token's loads and its stores never overlapped within the block and the
// block's 64 registers a thread kept four of them on an SM. Here a warp's stores leave as soon as its shuffles
// are done, and 8 warps (tokens) a block share nothing.
//
// The arithmetic is mla_rotation.cuh's rotated() / unrotated() term by term on the same fp32 values (bf16 widened
// exactly, angles from the same rotation()), so the results are the block kernels'.
#include <cstdint>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/mla_qkv_moves.cuh"
#include "moetune/ops/cuda/mla_qkv_paths.h"
#include "moetune/ops/cuda/mla_qkv_warp.h"
#include "moetune/ops/cuda/mla_rotation.cuh"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using mla_paths::kVec;
using pointwise::bf16;

using mla_moves::load16;
using mla_moves::Move;
using mla_moves::zeros16;

constexpr int kWarps = 8;  // tokens a block
constexpr unsigned kAll = 0xffffffffu;

__device__ __forceinline__ uint4 shuffle16(uint4 v, int lane) {
  return make_uint4(__shfl_sync(kAll, v.x, lane), __shfl_sync(kAll, v.y, lane), __shfl_sync(kAll, v.z, lane),
                    __shfl_sync(kAll, v.w, lane));
}

// Element j (0..7) of a 16-byte pack of bf16, widened exactly.
__device__ __forceinline__ float element(const uint4& v, int j) {
  const uint32_t word = j < 2 ? v.x : j < 4 ? v.y : j < 6 ? v.z : v.w;
  return __uint_as_float(j % 2 == 0 ? word << 16 : word & 0xffff0000u);
}

// A lane's place in the rope columns: chunk `chunk` (of `chunks` = rope / 8) of the head group's row, the group's
// first lane `base`; the rope's pairs are the lanes' (rope / 2 <= 32).
struct RopeLane {
  int chunk, chunks, base;
  __device__ RopeLane(int lane, int rope) : chunk(lane % (rope / kVec)), chunks(rope / kVec), base(lane - chunk) {}
  __device__ bool first_half() const { return chunk < chunks / 2; }
};

// The lane's own pair's rotation (lanes past the rope's pairs hold none): the one sincosf a lane and token.
__device__ __forceinline__ mla_rotation::Rotation lane_rotation(int lane, int32_t position, const float* inv_freq,
                                                                const MlaQkvShape& s) {
  return lane < s.rope / 2 ? mla_rotation::rotation(position, inv_freq, lane, s.scale) : mla_rotation::Rotation{0, 0};
}

// Pair `pair`'s cos and sin as rotation() gives them, from the lane that computed it.
struct Angles {
  float cos[kVec], sin[kVec];
};
template <typename PairOf>
__device__ __forceinline__ Angles gather_angles(const mla_rotation::Rotation& mine, const PairOf& pair_of) {
  Angles a;
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    a.cos[j] = __shfl_sync(kAll, mine.cos, pair_of(j));
    a.sin[j] = __shfl_sync(kAll, mine.sin, pair_of(j));
  }
  return a;
}

// rotated() for output columns [8·chunk, 8·chunk + 8) of one row whose chunks sit in the lane group; every lane of
// the warp calls (shuffles), `x` the lane's own chunk of its row.
__device__ __forceinline__ void rotate_chunk(const uint4& x, const RopeLane& r, bool interleaved, const Angles& a,
                                             float (&out)[kVec]) {
  float first[kVec], second[kVec];  // rotated()'s a and b for each output column
  if (interleaved) {                // pair p's inputs at 2p, 2p + 1: chunks 2·(chunk mod half) and the next
    const int lower = 2 * (r.chunk % (r.chunks / 2));
    const uint4 low = shuffle16(x, r.base + lower), high = shuffle16(x, r.base + lower + 1);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      first[j] = element(2 * j < kVec ? low : high, (2 * j) % kVec);
      second[j] = element(2 * j < kVec ? low : high, (2 * j + 1) % kVec);
    }
  } else {  // pair p's inputs at p, p + half: this chunk and the one half a row away
    const uint4 partner = shuffle16(x, r.base + (r.chunk ^ (r.chunks / 2)));
#pragma unroll
    for (int j = 0; j < kVec; ++j) {  // floats selected, not packs (a selected pack would go to local memory)
      const float own = element(x, j), other = element(partner, j);
      first[j] = r.first_half() ? own : other;
      second[j] = r.first_half() ? other : own;
    }
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j)
    out[j] = r.first_half() ? first[j] * a.cos[j] - second[j] * a.sin[j] : second[j] * a.cos[j] + first[j] * a.sin[j];
}

// unrotated() for input slots [8·chunk, 8·chunk + 8), dy given as fp32 packs: `dy` the lane's chunk of its row.
// Every lane calls (shuffles).
__device__ __forceinline__ void unrotate_chunk(const float (&dy)[kVec], const RopeLane& r, bool interleaved,
                                               const Angles& a, float (&out)[kVec]) {
  const auto shuffled = [&](int chunk, float(&to)[kVec]) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) to[j] = __shfl_sync(kAll, dy[j], r.base + chunk);
  };
  float da[kVec], db[kVec];  // dy at the slot's pair and at pair + half
  if (interleaved) {         // slot 8·chunk + j: pair 4·chunk + j / 2, first when j is even
    float low[kVec], high[kVec];
    shuffled(r.chunk / 2, low);
    shuffled(r.chunk / 2 + r.chunks / 2, high);
    const bool odd = r.chunk % 2 != 0;  // pairs 4·chunk.. sit in the upper half of their chunk
#pragma unroll
    for (int j = 0; j < kVec; ++j) {  // constant indices both ways: no local-memory array
      da[j] = odd ? low[kVec / 2 + j / 2] : low[j / 2];
      db[j] = odd ? high[kVec / 2 + j / 2] : high[j / 2];
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      out[j] = j % 2 == 0 ? da[j] * a.cos[j] + db[j] * a.sin[j] : db[j] * a.cos[j] - da[j] * a.sin[j];
  } else {  // slot 8·chunk + j: pair (8·chunk + j) mod half, first in the first half
    float partner[kVec];
    shuffled(r.chunk ^ (r.chunks / 2), partner);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      da[j] = r.first_half() ? dy[j] : partner[j];
      db[j] = r.first_half() ? partner[j] : dy[j];
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      out[j] = r.first_half() ? da[j] * a.cos[j] + db[j] * a.sin[j] : db[j] * a.cos[j] - da[j] * a.sin[j];
  }
}

__device__ __forceinline__ void widen(const uint4& x, float (&out)[kVec]) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) out[j] = element(x, j);
}

__global__ void __launch_bounds__(kWarps * 32)
    mla_qkv_forward_warp_kernel(bf16* __restrict__ q, const bf16* __restrict__ kv, const bf16* __restrict__ k_rope,
                                const float* __restrict__ inv_freq, const int32_t* __restrict__ positions,
                                bf16* __restrict__ k, bf16* __restrict__ v, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  const int lane = int(threadIdx.x % 32);
  const int64_t t = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (t >= s.tokens) return;  // the whole warp
  const int dqk = s.nope + s.rope, dkv = s.nope + s.v_dim;
  bf16* q_token = q + t * s.heads * dqk;
  const bf16* kv_token = kv + t * s.heads * dkv;
  bf16* k_token = k + t * s.heads * s.qk_width;
  bf16* v_token = v != nullptr ? v + t * s.heads * s.v_width : nullptr;  // null: v is read from kv in place

  // k's no-rope columns, and v (zeros past its real columns) where it is built.
  const int nope_chunks = s.nope / kVec, v_chunks = s.v_width / kVec, v_real = s.v_dim / kVec;
  mla_moves::run_moves(lane, 32, s.heads * nope_chunks, [&](int i) {
    const int h = i / nope_chunks, c = i - h * nope_chunks;
    return Move{kv_token + h * dkv + c * kVec, k_token + h * s.qk_width + c * kVec};
  });
  if (v_token != nullptr)
    mla_moves::run_moves(lane, 32, s.heads * v_chunks, [&](int i) {
      const int h = i / v_chunks, c = i - h * v_chunks;
      return Move{c < v_real ? kv_token + h * dkv + s.nope + c * kVec : nullptr, v_token + h * s.v_width + c * kVec};
    });

  const RopeLane r(lane, s.rope);
  const int half = s.rope / 2, group = 32 / r.chunks;  // heads a pass
  const mla_rotation::Rotation mine = lane_rotation(lane, positions[t], inv_freq, s);
  // Output column 8·chunk + j is pair (8·chunk + j) mod half, interleaved or not.
  const Angles angles = gather_angles(mine, [&](int j) { return (kVec * r.chunk + j) % half; });
  float out[kVec];
  // The shared key, rotated by every lane group alike and stored into each head's rope columns.
  rotate_chunk(load16(k_rope + t * s.k_rope_stride + r.chunk * kVec), r, s.interleaved, angles, out);
  for (int h = lane / r.chunks; h < s.heads; h += group)
    pointwise::store<kVec>(k_token + h * s.qk_width + s.nope + r.chunk * kVec, out);
  // q's rope columns in place, `group` heads a pass (every lane shuffles, lanes past the last head store nothing).
  for (int h0 = 0; h0 < s.heads; h0 += group) {
    const int h = h0 + lane / r.chunks;
    bf16* at = q_token + h * dqk + s.nope + r.chunk * kVec;
    rotate_chunk(h < s.heads ? load16(at) : zeros16(), r, s.interleaved, angles, out);
    if (h < s.heads) pointwise::store<kVec>(at, out);
  }
}

__global__ void __launch_bounds__(kWarps * 32)
    mla_qkv_backward_warp_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dk, const bf16* __restrict__ dv,
                                 const float* __restrict__ inv_freq, const int32_t* __restrict__ positions,
                                 bf16* __restrict__ dkv, bf16* __restrict__ dk_rope, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  const int lane = int(threadIdx.x % 32);
  const int64_t t = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (t >= s.tokens) return;  // the whole warp
  const int dqk = s.nope + s.rope, dkv_width = s.nope + s.v_dim;
  bf16* dq_token = dq + t * s.heads * dqk;
  const bf16* dk_token = dk + t * s.heads * s.qk_width;
  const bf16* dv_token = dv != nullptr ? dv + t * s.heads * s.v_width : nullptr;  // null: dv is dkv's already
  bf16* dkv_token = dkv + t * s.heads * dkv_width;

  // dkv = [dk's no-rope columns | dv's real columns] per head (dv's only where it is given).
  const int nope_chunks = s.nope / kVec, chunks = dv_token != nullptr ? dkv_width / kVec : nope_chunks;
  mla_moves::run_moves(lane, 32, s.heads * chunks, [&](int i) {
    const int h = i / chunks, c = i - h * chunks;
    return Move{
        c < nope_chunks ? dk_token + h * s.qk_width + c * kVec : dv_token + h * s.v_width + (c - nope_chunks) * kVec,
        dkv_token + h * dkv_width + c * kVec};
  });

  const RopeLane r(lane, s.rope);
  const int half = s.rope / 2, group = 32 / r.chunks;
  const mla_rotation::Rotation mine = lane_rotation(lane, positions[t], inv_freq, s);
  // Input slot 8·chunk + j's pair: (8·chunk + j) / 2 interleaved, (8·chunk + j) mod half otherwise.
  const Angles angles = gather_angles(mine, [&](int j) {
    const int slot = kVec * r.chunk + j;
    return s.interleaved ? slot / 2 : slot % half;
  });
  float dy[kVec], out[kVec];
  // The shared key's gradient: Σ over the heads in head order (as the block kernel sums), then the transpose.
  for (int j = 0; j < kVec; ++j) dy[j] = 0.0f;
  for (int h = 0; h < s.heads; ++h) {
    float x[kVec];
    widen(load16(dk_token + h * s.qk_width + s.nope + r.chunk * kVec), x);
#pragma unroll
    for (int j = 0; j < kVec; ++j) dy[j] += x[j];
  }
  unrotate_chunk(dy, r, s.interleaved, angles, out);
  if (lane < r.chunks) pointwise::store<kVec>(dk_rope + t * s.k_rope_stride + r.chunk * kVec, out);
  // dq's rope columns rotated back in place, `group` heads a pass.
  for (int h0 = 0; h0 < s.heads; h0 += group) {
    const int h = h0 + lane / r.chunks;
    bf16* at = dq_token + h * dqk + s.nope + r.chunk * kVec;
    widen(h < s.heads ? load16(at) : zeros16(), dy);
    unrotate_chunk(dy, r, s.interleaved, angles, out);
    if (h < s.heads) pointwise::store<kVec>(at, out);
  }
}

}  // namespace

bool mla_qkv_warp_takes(const MlaQkvShape& s, std::initializer_list<const void*> tensors) {
  return (s.rope == 16 || s.rope == 32 || s.rope == 64) && s.qk_width == s.nope + s.rope &&
         mla_paths::vector_path(s, tensors);
}

cudaError_t launch_mla_qkv_forward_warp(void* q, const void* kv, const void* k_rope, const float* inv_freq,
                                        const int32_t* positions, void* k, void* v, MlaQkvShape shape,
                                        cudaStream_t stream) {
  if (!mla_qkv_warp_takes(shape, {q, kv, k_rope, k, v})) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  gpu::launch_dependent(mla_qkv_forward_warp_kernel, unsigned((shape.tokens + kWarps - 1) / kWarps), kWarps * 32, 0,
                        stream, static_cast<bf16*>(q), static_cast<const bf16*>(kv), static_cast<const bf16*>(k_rope),
                        inv_freq, positions, static_cast<bf16*>(k), static_cast<bf16*>(v), shape);
  return cudaGetLastError();
}

cudaError_t launch_mla_qkv_backward_warp(void* dq, const void* dk, const void* dv, const float* inv_freq,
                                         const int32_t* positions, void* dkv, void* dk_rope, MlaQkvShape shape,
                                         cudaStream_t stream) {
  if (!mla_qkv_warp_takes(shape, {dq, dk, dv, dkv, dk_rope})) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  gpu::launch_dependent(mla_qkv_backward_warp_kernel, unsigned((shape.tokens + kWarps - 1) / kWarps), kWarps * 32, 0,
                        stream, static_cast<bf16*>(dq), static_cast<const bf16*>(dk), static_cast<const bf16*>(dv),
                        inv_freq, positions, static_cast<bf16*>(dkv), static_cast<bf16*>(dk_rope), shape);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
