// MLA's q, k and v for flash attention: one block per token, each warp one head at a time. A warp stages its
// head's inputs in shared memory with 16-byte loads, then writes 8 output columns per lane with 16-byte stores:
// the no-rope columns copied, the rope columns rotated (each head's own q part, and the token's one shared key
// broadcast to every head), everything past the real columns zeroed so that padded head widths change no score
// and no kept output. cos and sin are computed once per token (not once per element and head). The backward pass
// is the transpose; the shared key's gradient is summed over the heads in fp32, in head order, before the
// (linear) inverse rotation. Shapes whose widths are not multiples of 8 take scalar loads and stores.
#include <algorithm>
#include <cstdint>

#include "moetune/ops/cuda/mla_qkv_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using pointwise::bf16;
using pointwise::from_float;
using pointwise::to_float;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kVec = 8;  // bf16 per 16-byte access

__host__ __device__ constexpr int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

__device__ __forceinline__ bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// n elements from global to shared memory by the calling warp (16-byte loads where both allow).
__device__ __forceinline__ void stage(bf16* dst, const bf16* __restrict__ src, int n, int lane) {
  if (n % kVec == 0 && aligned_16(src)) {
    for (int i = lane * kVec; i < n; i += 32 * kVec)
      *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
  } else {
    for (int i = lane; i < n; i += 32) dst[i] = src[i];
  }
}

// Writes n outputs value(c) for c in [0, n) by the calling warp: 8 columns per lane and one 16-byte store where
// n and dst allow, else one column per lane.
template <typename Value>
__device__ __forceinline__ void emit(bf16* __restrict__ dst, int n, int lane, Value value) {
  if (n % kVec == 0 && aligned_16(dst)) {
    for (int c0 = lane * kVec; c0 < n; c0 += 32 * kVec) {
      float out[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) out[k] = value(c0 + k);
      pointwise::store<kVec>(dst + c0, out);
    }
  } else {
    for (int c = lane; c < n; c += 32) dst[c] = from_float<bf16>(value(c));
  }
}

// The token's rotation per pair i: cos and sin of the fp32 angle, times the attention factor.
__device__ __forceinline__ void fill_rotation(float* cos_table, float* sin_table, int32_t position,
                                              const float* __restrict__ inv_freq, const MlaQkvShape& s) {
  for (int i = threadIdx.x; i < s.rope / 2; i += blockDim.x) {
    float sn, cs;
    sincosf(float(position) * inv_freq[i], &sn, &cs);
    cos_table[i] = cs * s.scale;
    sin_table[i] = sn * s.scale;
  }
}

// Pair i's input slots: (2i, 2i+1) interleaved, (i, i + half) rotate-half style. Outputs are always (i, i + half).
__device__ __forceinline__ int first_slot(int pair, int half, bool interleaved) { return interleaved ? 2 * pair : pair; }
__device__ __forceinline__ int second_slot(int pair, int half, bool interleaved) {
  return interleaved ? 2 * pair + 1 : pair + half;
}

// Output column c (< rope) of the rotation of x[0..rope).
__device__ __forceinline__ float rotated(const bf16* x, int c, const MlaQkvShape& s, const float* cos_table,
                                         const float* sin_table) {
  const int half = s.rope / 2, pair = c % half;
  const float a = to_float(x[first_slot(pair, half, s.interleaved)]);
  const float b = to_float(x[second_slot(pair, half, s.interleaved)]);
  return c < half ? a * cos_table[pair] - b * sin_table[pair] : b * cos_table[pair] + a * sin_table[pair];
}

// Input slot j (< rope) of the transpose of the rotation, given dy[0..rope) as fp32 through `dy_at`.
template <typename DyAt>
__device__ __forceinline__ float unrotated(DyAt dy_at, int j, const MlaQkvShape& s, const float* cos_table,
                                           const float* sin_table) {
  const int half = s.rope / 2;
  const int pair = s.interleaved ? j / 2 : j % half;
  const bool first = s.interleaved ? j % 2 == 0 : j < half;
  const float da = dy_at(pair), db = dy_at(pair + half);
  return first ? da * cos_table[pair] + db * sin_table[pair] : db * cos_table[pair] - da * sin_table[pair];
}

// Shared memory: per token the rotation (and the key or its per-head gradients), then one staging area per warp;
// every part a multiple of 16 bytes.
struct ForwardSmem {
  int64_t rotation_bytes, key_bytes, warp_elements;
  __host__ __device__ static ForwardSmem of(const MlaQkvShape& s) {
    return {round_up(int64_t(s.rope / 2) * 8, 16), round_up(int64_t(s.rope) * 2, 16),
            round_up(s.nope + s.rope, kVec) + round_up(s.nope + s.v_dim, kVec)};
  }
  __host__ __device__ int64_t bytes() const { return rotation_bytes + key_bytes + kWarps * warp_elements * 2; }
};

struct BackwardSmem {
  int64_t rotation_bytes, key_bytes, warp_elements;
  __host__ __device__ static BackwardSmem of(const MlaQkvShape& s) {
    return {round_up(int64_t(s.rope / 2) * 8, 16), round_up(int64_t(s.heads) * s.rope * 4, 16),
            2 * round_up(s.qk_width, kVec) + round_up(s.v_width, kVec)};
  }
  __host__ __device__ int64_t bytes() const { return rotation_bytes + key_bytes + kWarps * warp_elements * 2; }
};

__global__ void __launch_bounds__(kThreads)
    mla_qkv_forward_kernel(const bf16* __restrict__ q_proj, const bf16* __restrict__ kv,
                           const bf16* __restrict__ k_rope, const float* __restrict__ inv_freq,
                           const int32_t* __restrict__ positions, bf16* __restrict__ q, bf16* __restrict__ k,
                           bf16* __restrict__ v, MlaQkvShape s) {
  extern __shared__ __align__(16) unsigned char smem[];
  const ForwardSmem layout = ForwardSmem::of(s);
  float* cos_table = reinterpret_cast<float*>(smem);
  float* sin_table = cos_table + s.rope / 2;
  bf16* key = reinterpret_cast<bf16*>(smem + layout.rotation_bytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16* q_in = reinterpret_cast<bf16*>(smem + layout.rotation_bytes + layout.key_bytes) + warp * layout.warp_elements;
  bf16* kv_in = q_in + round_up(s.nope + s.rope, kVec);

  const int64_t t = blockIdx.x;
  const int dqk = s.nope + s.rope, dkv = s.nope + s.v_dim;
  fill_rotation(cos_table, sin_table, positions[t], inv_freq, s);
  for (int i = threadIdx.x; i < s.rope; i += blockDim.x) key[i] = k_rope[t * s.rope + i];
  __syncthreads();
  for (int h = warp; h < s.heads; h += kWarps) {
    const int64_t head = t * s.heads + h;
    stage(q_in, q_proj + head * dqk, dqk, lane);
    stage(kv_in, kv + head * dkv, dkv, lane);
    __syncwarp();
    emit(q + head * s.qk_width, s.qk_width, lane, [&](int c) {
      return c < s.nope ? to_float(q_in[c]) : c < dqk ? rotated(q_in + s.nope, c - s.nope, s, cos_table, sin_table) : 0.0f;
    });
    emit(k + head * s.qk_width, s.qk_width, lane, [&](int c) {
      return c < s.nope ? to_float(kv_in[c]) : c < dqk ? rotated(key, c - s.nope, s, cos_table, sin_table) : 0.0f;
    });
    emit(v + head * s.v_width, s.v_width, lane, [&](int c) { return c < s.v_dim ? to_float(kv_in[s.nope + c]) : 0.0f; });
    __syncwarp();  // the next head's loads overwrite this one's
  }
}

__global__ void __launch_bounds__(kThreads)
    mla_qkv_backward_kernel(const bf16* __restrict__ dq, const bf16* __restrict__ dk, const bf16* __restrict__ dv,
                            const float* __restrict__ inv_freq, const int32_t* __restrict__ positions,
                            bf16* __restrict__ dq_proj, bf16* __restrict__ dkv, bf16* __restrict__ dk_rope,
                            MlaQkvShape s) {
  extern __shared__ __align__(16) unsigned char smem[];
  const BackwardSmem layout = BackwardSmem::of(s);
  float* cos_table = reinterpret_cast<float*>(smem);
  float* sin_table = cos_table + s.rope / 2;
  float* key_grads = reinterpret_cast<float*>(smem + layout.rotation_bytes);  // [heads, rope]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16* dq_in = reinterpret_cast<bf16*>(smem + layout.rotation_bytes + layout.key_bytes) + warp * layout.warp_elements;
  bf16* dk_in = dq_in + round_up(s.qk_width, kVec);
  bf16* dv_in = dk_in + round_up(s.qk_width, kVec);

  const int64_t t = blockIdx.x;
  const int dqk = s.nope + s.rope, dkv_width = s.nope + s.v_dim;
  fill_rotation(cos_table, sin_table, positions[t], inv_freq, s);
  __syncthreads();
  for (int h = warp; h < s.heads; h += kWarps) {
    const int64_t head = t * s.heads + h;
    stage(dq_in, dq + head * s.qk_width, s.qk_width, lane);
    stage(dk_in, dk + head * s.qk_width, s.qk_width, lane);
    stage(dv_in, dv + head * s.v_width, s.v_width, lane);
    __syncwarp();
    emit(dq_proj + head * dqk, dqk, lane, [&](int c) {
      return c < s.nope ? to_float(dq_in[c])
                        : unrotated([&](int i) { return to_float(dq_in[s.nope + i]); }, c - s.nope, s, cos_table, sin_table);
    });
    emit(dkv + head * dkv_width, dkv_width, lane,
         [&](int c) { return c < s.nope ? to_float(dk_in[c]) : to_float(dv_in[c - s.nope]); });
    for (int i = lane; i < s.rope; i += 32) key_grads[h * s.rope + i] = to_float(dk_in[s.nope + i]);
    __syncwarp();
  }
  __syncthreads();
  // The shared key: Σ over heads, in fp32 and head order, then the transpose of the rotation.
  const auto summed = [&](int i) {
    float total = 0.0f;
    for (int h = 0; h < s.heads; ++h) total += key_grads[h * s.rope + i];
    return total;
  };
  for (int j = threadIdx.x; j < s.rope; j += blockDim.x)
    dk_rope[t * s.rope + j] = from_float<bf16>(unrotated(summed, j, s, cos_table, sin_table));
}

// Element type T: bf16, or uint4 (8 bf16 at a time) when both widths and both pointers allow.
template <typename T>
__global__ void copy_leading_columns_kernel(const T* __restrict__ src, int64_t src_width, T* __restrict__ dst,
                                            int64_t dst_width, int64_t total) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / dst_width, c = i % dst_width;
    dst[i] = c < src_width ? src[row * src_width + c] : T{};
  }
}

bool valid(const MlaQkvShape& s) {
  return s.tokens >= 0 && s.tokens <= INT32_MAX && s.heads > 0 && s.nope >= 0 && s.rope > 0 && s.rope % 2 == 0 &&
         s.v_dim > 0 && s.qk_width >= s.nope + s.rope && s.v_width >= s.v_dim;
}

// Beyond the default 48 KB of dynamic shared memory a kernel must opt in (many heads: the backward pass keeps
// every head's rope-key gradient of the token).
template <typename Kernel>
cudaError_t allow_shared_memory(Kernel kernel, int64_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

}  // namespace

cudaError_t launch_mla_qkv_forward(const void* q_proj, const void* kv, const void* k_rope, const float* inv_freq,
                                   const int32_t* positions, void* q, void* k, void* v, MlaQkvShape shape,
                                   cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  const int64_t bytes = ForwardSmem::of(shape).bytes();
  if (const cudaError_t status = allow_shared_memory(mla_qkv_forward_kernel, bytes); status != cudaSuccess) return status;
  mla_qkv_forward_kernel<<<unsigned(shape.tokens), kThreads, size_t(bytes), stream>>>(
      static_cast<const bf16*>(q_proj), static_cast<const bf16*>(kv), static_cast<const bf16*>(k_rope), inv_freq,
      positions, static_cast<bf16*>(q), static_cast<bf16*>(k), static_cast<bf16*>(v), shape);
  return cudaGetLastError();
}

cudaError_t launch_mla_qkv_backward(const void* dq, const void* dk, const void* dv, const float* inv_freq,
                                    const int32_t* positions, void* dq_proj, void* dkv, void* dk_rope, MlaQkvShape shape,
                                    cudaStream_t stream) {
  if (!valid(shape)) return cudaErrorInvalidValue;
  if (shape.tokens == 0) return cudaSuccess;
  const int64_t bytes = BackwardSmem::of(shape).bytes();
  if (const cudaError_t status = allow_shared_memory(mla_qkv_backward_kernel, bytes); status != cudaSuccess) return status;
  mla_qkv_backward_kernel<<<unsigned(shape.tokens), kThreads, size_t(bytes), stream>>>(
      static_cast<const bf16*>(dq), static_cast<const bf16*>(dk), static_cast<const bf16*>(dv), inv_freq, positions,
      static_cast<bf16*>(dq_proj), static_cast<bf16*>(dkv), static_cast<bf16*>(dk_rope), shape);
  return cudaGetLastError();
}

cudaError_t launch_copy_leading_columns(const void* src, int64_t src_width, void* dst, int64_t dst_width, int64_t rows,
                                        cudaStream_t stream) {
  if (src_width <= 0 || dst_width <= 0 || rows < 0) return cudaErrorInvalidValue;
  const bool vectors = src_width % kVec == 0 && dst_width % kVec == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  const int64_t per = vectors ? kVec : 1, total = rows * dst_width / per;
  if (total == 0) return cudaSuccess;
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 65535));
  if (vectors)
    copy_leading_columns_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(src), src_width / per,
                                                            static_cast<uint4*>(dst), dst_width / per, total);
  else
    copy_leading_columns_kernel<<<blocks, 256, 0, stream>>>(static_cast<const bf16*>(src), src_width,
                                                            static_cast<bf16*>(dst), dst_width, total);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
