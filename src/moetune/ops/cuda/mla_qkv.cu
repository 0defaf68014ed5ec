// MLA's q, k and v for flash attention, one block per token: the no-rope columns are copied, the rope columns
// rotated (each head's own q part, and the one shared key broadcast to every head), everything past the real
// columns zeroed so that padded head widths change no score and no kept output. The backward pass is the
// transpose; the shared key's gradient is summed over the heads before the (linear) inverse rotation. Where q's
// width is q_proj's, q is q_proj itself with its rope columns rotated in place (and dq likewise back into dq_proj),
// which leaves the copy of its no-rope columns out.
#include <algorithm>
#include <cstdint>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/mla_qkv_kernels.h"
#include "moetune/ops/cuda/mla_qkv_paths.h"
#include "moetune/ops/cuda/mla_rotation.cuh"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using pointwise::bf16;
using pointwise::from_float;
using pointwise::to_float;
using mla_rotation::RotationAtPosition;
using mla_rotation::rotated;
using mla_rotation::unrotated;

constexpr int kThreads = 128;

__global__ void mla_qkv_forward_kernel(const bf16* __restrict__ q_proj, const bf16* __restrict__ kv,
                                       const bf16* __restrict__ k_rope, const float* __restrict__ inv_freq,
                                       const int32_t* __restrict__ positions, bf16* __restrict__ q,
                                       bf16* __restrict__ k, bf16* __restrict__ v, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  const int64_t t = blockIdx.x;
  const RotationAtPosition at_position{positions[t], inv_freq, s.scale};
  const int dqk = s.nope + s.rope, dkv = s.nope + s.v_dim;
  const bf16* key_rope = k_rope + t * s.k_rope_stride;
  for (int idx = threadIdx.x; idx < s.heads * s.qk_width; idx += blockDim.x) {
    const int h = idx / s.qk_width, c = idx % s.qk_width;
    const bf16* kv_head = kv + (t * s.heads + h) * dkv;
    const float kval = c < s.nope ? to_float(kv_head[c])
                       : c < dqk  ? rotated(key_rope, c - s.nope, s, at_position)
                                  : 0.0f;
    const int64_t out = (t * s.heads + h) * s.qk_width + c;
    k[out] = from_float<bf16>(kval);
    if (q == nullptr) continue;  // q is q_proj, rotated in place (mla_q_rope_in_place_kernel)
    const bf16* q_head = q_proj + (t * s.heads + h) * dqk;
    const float qv = c < s.nope ? to_float(q_head[c]) : c < dqk ? rotated(q_head + s.nope, c - s.nope, s, at_position) : 0.0f;
    q[out] = from_float<bf16>(qv);
  }
  for (int idx = threadIdx.x; idx < s.heads * s.v_width; idx += blockDim.x) {
    const int h = idx / s.v_width, c = idx % s.v_width;
    v[(t * s.heads + h) * s.v_width + c] = c < s.v_dim ? kv[(t * s.heads + h) * dkv + s.nope + c] : from_float<bf16>(0.0f);
  }
}

__global__ void mla_qkv_backward_kernel(const bf16* __restrict__ dq, const bf16* __restrict__ dk,
                                        const bf16* __restrict__ dv, const float* __restrict__ inv_freq,
                                        const int32_t* __restrict__ positions, bf16* __restrict__ dq_proj,
                                        bf16* __restrict__ dkv, bf16* __restrict__ dk_rope, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  const int64_t t = blockIdx.x;
  const RotationAtPosition at_position{positions[t], inv_freq, s.scale};
  const int dqk = s.nope + s.rope, dkv_width = s.nope + s.v_dim;
  for (int idx = threadIdx.x; dq != nullptr && idx < s.heads * dqk; idx += blockDim.x) {  // else dq is rotated in place
    const int h = idx / dqk, c = idx % dqk;
    const bf16* dq_head = dq + (t * s.heads + h) * s.qk_width;
    const float value =
        c < s.nope ? to_float(dq_head[c])
                   : unrotated([&](int i) { return to_float(dq_head[s.nope + i]); }, c - s.nope, s, at_position);
    dq_proj[(t * s.heads + h) * dqk + c] = from_float<bf16>(value);
  }
  for (int idx = threadIdx.x; idx < s.heads * dkv_width; idx += blockDim.x) {
    const int h = idx / dkv_width, c = idx % dkv_width;
    const bf16 value = c < s.nope ? dk[(t * s.heads + h) * s.qk_width + c] : dv[(t * s.heads + h) * s.v_width + c - s.nope];
    dkv[(t * s.heads + h) * dkv_width + c] = value;
  }
  // The shared key: Σ over heads, in fp32, then the transpose of the rotation.
  const auto summed = [&](int i) {
    float total = 0.0f;
    for (int h = 0; h < s.heads; ++h) total += to_float(dk[(t * s.heads + h) * s.qk_width + s.nope + i]);
    return total;
  };
  for (int j = threadIdx.x; j < s.rope; j += blockDim.x)
    dk_rope[t * s.k_rope_stride + j] = from_float<bf16>(unrotated(summed, j, s, at_position));
}

// k and v alone (q rotated in place by mla_q_rope_in_place_kernel) with 16-byte accesses: one thread per 8
// consecutive output columns of a token's k row (all heads) then its v row, so every access is one vector and
// consecutive threads touch consecutive bytes; index arithmetic once per 8 columns. Needs every width and
// boundary (nope, rope, v_dim, qk_width, v_width) a multiple of 8, so that no chunk straddles two kinds of
// column, and 16-byte aligned tensors (vector_path()).
using mla_paths::kVec;
using mla_paths::valid;
using mla_paths::vector_path;
constexpr int kVecThreads = 256;

__device__ __forceinline__ void copy_chunk(bf16* __restrict__ dst, const bf16* __restrict__ src) {
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

__global__ void __launch_bounds__(kVecThreads)
    mla_kv_forward_vec_kernel(const bf16* __restrict__ kv, const bf16* __restrict__ k_rope,
                              const float* __restrict__ inv_freq, const int32_t* __restrict__ positions,
                              bf16* __restrict__ k, bf16* __restrict__ v, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  const int k_chunks = s.qk_width / kVec, v_chunks = s.v_width / kVec, dkv = s.nope + s.v_dim;
  const int64_t per_token = int64_t(s.heads) * (k_chunks + v_chunks), total = s.tokens * per_token;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_token;
    int r = int(i - t * per_token);
    float out[kVec];
    bf16* dst;
    if (r < s.heads * k_chunks) {
      const int h = r / k_chunks, c0 = (r - h * k_chunks) * kVec;
      dst = k + (t * s.heads + h) * s.qk_width + c0;
      if (c0 < s.nope) {
        copy_chunk(dst, kv + (t * s.heads + h) * dkv + c0);
        continue;
      }
      const RotationAtPosition at_position{positions[t], inv_freq, s.scale};
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        out[j] = c0 < s.nope + s.rope ? rotated(k_rope + t * s.k_rope_stride, c0 - s.nope + j, s, at_position) : 0.0f;
    } else {
      r -= s.heads * k_chunks;
      const int h = r / v_chunks, c0 = (r - h * v_chunks) * kVec;
      dst = v + (t * s.heads + h) * s.v_width + c0;
      if (c0 < s.v_dim) {
        copy_chunk(dst, kv + (t * s.heads + h) * dkv + s.nope + c0);
        continue;
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) out[j] = 0.0f;
    }
    pointwise::store<kVec>(dst, out);
  }
}

// The transpose with dq turned into dq_proj in place: dkv = [dk's no-rope columns | dv] per head, one thread per 8
// columns of a token's dkv row, then dk_rope's chunks (Σ over heads in fp32, then the inverse rotation). Same
// requirements as the forward kernel.
__global__ void __launch_bounds__(kVecThreads)
    mla_kv_backward_vec_kernel(const bf16* __restrict__ dk, const bf16* __restrict__ dv,
                               const float* __restrict__ inv_freq, const int32_t* __restrict__ positions,
                               bf16* __restrict__ dkv, bf16* __restrict__ dk_rope, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  const int dkv_width = s.nope + s.v_dim, kv_chunks = dkv_width / kVec, rope_chunks = s.rope / kVec;
  const int64_t per_token = int64_t(s.heads) * kv_chunks + rope_chunks, total = s.tokens * per_token;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_token;
    const int r = int(i - t * per_token);
    if (r < s.heads * kv_chunks) {
      const int h = r / kv_chunks, c0 = (r - h * kv_chunks) * kVec;
      const int64_t head = t * s.heads + h;
      copy_chunk(dkv + head * dkv_width + c0,
                 c0 < s.nope ? dk + head * s.qk_width + c0 : dv + head * s.v_width + (c0 - s.nope));
      continue;
    }
    const int j0 = (r - s.heads * kv_chunks) * kVec;
    const auto summed = [&](int c) {
      float total_grad = 0.0f;
      for (int h = 0; h < s.heads; ++h) total_grad += to_float(dk[(t * s.heads + h) * s.qk_width + s.nope + c]);
      return total_grad;
    };
    const RotationAtPosition at_position{positions[t], inv_freq, s.scale};
    float out[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) out[j] = unrotated(summed, j0 + j, s, at_position);
    pointwise::store<kVec>(dk_rope + t * s.k_rope_stride + j0, out);
  }
}

// q [T, heads, nope + rope] in place: each head's rope columns rotated (kBackward: by the transpose, dq into
// dq_proj). One warp a (token, head). The head's rope columns are staged in shared memory first because the
// rotation reads columns other lanes write (interleaved: pair i moves from slots 2i, 2i+1 to i, i + rope / 2).
constexpr int kRopeWarps = 8;

struct StagedAt {  // dy_at for unrotated(): the staged gradient as fp32
  const bf16* x;
  __device__ float operator()(int i) const { return to_float(x[i]); }
};

template <bool kBackward>
__global__ void __launch_bounds__(kRopeWarps * 32)
    mla_q_rope_in_place_kernel(bf16* __restrict__ q, const float* __restrict__ inv_freq,
                               const int32_t* __restrict__ positions, MlaQkvShape s) {
  gpu::wait_for_previous_kernel();
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16* staged = reinterpret_cast<bf16*>(smem) + warp * s.rope;
  const int64_t row = int64_t(blockIdx.x) * kRopeWarps + warp;  // token * heads + head
  if (row >= s.tokens * s.heads) return;                         // a whole warp: no block-wide barrier follows
  const RotationAtPosition at_position{positions[row / s.heads], inv_freq, s.scale};
  bf16* x = q + row * (s.nope + s.rope) + s.nope;
  for (int i = lane; i < s.rope; i += 32) staged[i] = x[i];
  __syncwarp();
  for (int c = lane; c < s.rope; c += 32) {
    float value;
    if constexpr (kBackward) {
      value = unrotated(StagedAt{staged}, c, s, at_position);
    } else {
      value = rotated(staged, c, s, at_position);
    }
    x[c] = from_float<bf16>(value);
  }
}

__global__ void copy_leading_columns_kernel(const bf16* __restrict__ src, int64_t src_width, bf16* __restrict__ dst,
                                            int64_t dst_width, int64_t total) {
  gpu::wait_for_previous_kernel();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / dst_width, c = i % dst_width;
    dst[i] = c < src_width ? src[row * src_width + c] : from_float<bf16>(0.0f);
  }
}

unsigned vector_blocks(int64_t chunks) {
  return unsigned(std::min<int64_t>((chunks + kVecThreads - 1) / kVecThreads, int64_t(1) << 20));
}

}  // namespace

cudaError_t launch_mla_qkv_forward(const void* q_proj, const void* kv, const void* k_rope, const float* inv_freq,
                                   const int32_t* positions, void* q, void* k, void* v, MlaQkvShape shape,
                                   cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  if (q == nullptr && vector_path(shape, {kv, k_rope, k, v})) {
    const int64_t chunks = shape.tokens * shape.heads * ((shape.qk_width + shape.v_width) / kVec);
    gpu::launch_dependent(mla_kv_forward_vec_kernel, vector_blocks(chunks), kVecThreads, 0, stream,
                          static_cast<const bf16*>(kv), static_cast<const bf16*>(k_rope), inv_freq, positions,
                          static_cast<bf16*>(k), static_cast<bf16*>(v), shape);
    return cudaGetLastError();
  }
  gpu::launch_dependent(mla_qkv_forward_kernel, unsigned(shape.tokens), kThreads, 0, stream,
                        static_cast<const bf16*>(q_proj), static_cast<const bf16*>(kv),
                        static_cast<const bf16*>(k_rope), inv_freq, positions, static_cast<bf16*>(q),
                        static_cast<bf16*>(k), static_cast<bf16*>(v), shape);
  return cudaGetLastError();
}

cudaError_t launch_mla_qkv_backward(const void* dq, const void* dk, const void* dv, const float* inv_freq,
                                    const int32_t* positions, void* dq_proj, void* dkv, void* dk_rope, MlaQkvShape shape,
                                    cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  if (dq == nullptr && vector_path(shape, {dk, dv, dkv, dk_rope})) {
    const int64_t chunks = shape.tokens * (shape.heads * ((shape.nope + shape.v_dim) / kVec) + shape.rope / kVec);
    gpu::launch_dependent(mla_kv_backward_vec_kernel, vector_blocks(chunks), kVecThreads, 0, stream,
                          static_cast<const bf16*>(dk), static_cast<const bf16*>(dv), inv_freq, positions,
                          static_cast<bf16*>(dkv), static_cast<bf16*>(dk_rope), shape);
    return cudaGetLastError();
  }
  gpu::launch_dependent(mla_qkv_backward_kernel, unsigned(shape.tokens), kThreads, 0, stream,
                        static_cast<const bf16*>(dq), static_cast<const bf16*>(dk), static_cast<const bf16*>(dv),
                        inv_freq, positions, static_cast<bf16*>(dq_proj), static_cast<bf16*>(dkv),
                        static_cast<bf16*>(dk_rope), shape);
  return cudaGetLastError();
}

cudaError_t launch_mla_q_rope_in_place(void* q, const float* inv_freq, const int32_t* positions, MlaQkvShape shape,
                                       bool backward, cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
  const int64_t rows = shape.tokens * shape.heads;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows + kRopeWarps - 1) / kRopeWarps;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  const size_t smem = size_t(kRopeWarps) * size_t(shape.rope) * sizeof(bf16);
  auto* data = static_cast<bf16*>(q);
  if (backward)
    gpu::launch_dependent(mla_q_rope_in_place_kernel<true>, unsigned(blocks), kRopeWarps * 32, smem, stream, data,
                          inv_freq, positions, shape);
  else
    gpu::launch_dependent(mla_q_rope_in_place_kernel<false>, unsigned(blocks), kRopeWarps * 32, smem, stream, data,
                          inv_freq, positions, shape);
  return cudaGetLastError();
}

cudaError_t launch_copy_leading_columns(const void* src, int64_t src_width, void* dst, int64_t dst_width, int64_t rows,
                                        cudaStream_t stream) {
  if (src_width <= 0 || dst_width <= 0 || rows < 0) return cudaErrorInvalidValue;
  const int64_t total = rows * dst_width;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
  gpu::launch_dependent(copy_leading_columns_kernel, unsigned(blocks), 256, 0, stream, static_cast<const bf16*>(src),
                        src_width, static_cast<bf16*>(dst), dst_width, total);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
