// Attention prep in one pass over the fused QKV projection: one warp per (token, head). A q or k head is
// normalised over head_dim (when its weight is given) and rotated rotate-half style; a v head is copied. Each lane
// owns the pairs (i, i + d/2) for i ≡ lane·kVec (mod 32·kVec), so the norm statistics are one warp sum and the
// rotation never leaves the lane. The backward keeps its norm-weight partials per warp in shared memory, sums the
// warps in a fixed order per block and the blocks in a fixed order after (no atomics: deterministic).
#include <algorithm>
#include <initializer_list>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/column_sum_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"
#include "moetune/ops/cuda/qkv_rope_kernels.h"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * 32;
// A fixed block count for the backward, so the gradient's summation order is the same on every GPU.
constexpr int64_t kBackwardBlocks = 1024;
constexpr int64_t kMaxForwardBlocks = int64_t(1) << 30;

struct HeadIndex {
  int64_t token;
  int64_t head;  // in [0, q_heads + 2·kv_heads)
};

__device__ __forceinline__ HeadIndex head_of(int64_t item, int64_t heads) { return {item / heads, item % heads}; }

// Where a head begins in a qkv row: k's and v's heads after the gate's columns (QkvShape::gate_heads).
__device__ __forceinline__ int64_t qkv_offset(const QkvShape& shape, HeadIndex at) {
  const int64_t row_heads = shape.q_heads + shape.gate_heads + 2 * shape.kv_heads;
  return (at.token * row_heads + at.head + (at.head >= shape.q_heads ? shape.gate_heads : 0)) * shape.head_dim;
}

// The rotation of pair i at `position`, cos and sin times `scale` where the pair rotates (QkvShape::rotated_scale);
// no inv_freq (a model without RoPE, Nemotron-H) is the identity, exactly.
__device__ __forceinline__ void rotation(const float* inv_freq, int64_t i, float position, float scale, float& sine,
                                         float& cosine) {
  if (inv_freq == nullptr) {
    sine = 0.0f;
    cosine = 1.0f;
    return;
  }
  const float frequency = inv_freq[i];
  sincosf(position * frequency, &sine, &cosine);
  if (frequency != 0.0f) {
    sine *= scale;
    cosine *= scale;
  }
}

template <int kVec>
__device__ __forceinline__ void copy_head(const bf16* in, bf16* out, int64_t head_dim, int lane) {
  for (int64_t c = int64_t(lane) * kVec; c < head_dim; c += 32 * kVec) {
    float v[kVec];
    load<kVec>(in + c, v);
    store<kVec>(out + c, v);
  }
}

// The norm's scale is offset + weight (Gemma's 1 + weight; offset 0 elsewhere, exact), in fp32.
template <int kVec>
__device__ __forceinline__ void add_offset(float offset, float (&wa)[kVec], float (&wb)[kVec]) {
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    wa[j] += offset;
    wb[j] += offset;
  }
}

template <int kVec>
__global__ void qkv_norm_rope_forward_kernel(const bf16* __restrict__ qkv, const bf16* __restrict__ q_norm,
                                             const bf16* __restrict__ k_norm, float eps,
                                             const float* __restrict__ inv_freq, const int32_t* __restrict__ positions,
                                             bf16* __restrict__ q, bf16* __restrict__ k, bf16* __restrict__ v,
                                             QkvShape shape) {
  gpu::wait_for_previous_kernel();
  const int lane = threadIdx.x & 31;
  const int64_t d = shape.head_dim, half = d / 2;
  const int64_t heads = shape.q_heads + 2 * shape.kv_heads, items = shape.tokens * heads;
  const int64_t warps_in_grid = int64_t(gridDim.x) * kWarpsPerBlock;
  // `item` is the same for the whole warp, so every branch below is warp-uniform and warp_sum is safe.
  for (int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; item < items; item += warps_in_grid) {
    const HeadIndex at = head_of(item, heads);
    const bf16* in = qkv + qkv_offset(shape, at);
    if (at.head >= shape.q_heads + shape.kv_heads) {
      copy_head<kVec>(in, v + (at.token * shape.kv_heads + at.head - shape.q_heads - shape.kv_heads) * d, d, lane);
      continue;
    }
    const bool is_q = at.head < shape.q_heads;
    bf16* out = is_q ? q + (at.token * shape.q_heads + at.head) * d
                     : k + (at.token * shape.kv_heads + at.head - shape.q_heads) * d;
    const bf16* weight = is_q ? q_norm : k_norm;

    float rstd = 1.0f;
    if (weight != nullptr) {
      float square_sum = 0.0f;
      for (int64_t i = int64_t(lane) * kVec; i < half; i += 32 * kVec) {
        float a[kVec], b[kVec];
        load<kVec>(in + i, a);
        load<kVec>(in + half + i, b);
#pragma unroll
        for (int j = 0; j < kVec; ++j) square_sum += a[j] * a[j] + b[j] * b[j];
      }
      rstd = 1.0f / sqrtf(warp_sum(square_sum) / float(d) + eps);
    }

    const float position = inv_freq != nullptr ? float(positions[at.token]) : 0.0f;
    for (int64_t i = int64_t(lane) * kVec; i < half; i += 32 * kVec) {
      float a[kVec], b[kVec];
      load<kVec>(in + i, a);
      load<kVec>(in + half + i, b);
      if (weight != nullptr) {
        float wa[kVec], wb[kVec];
        load<kVec>(weight + i, wa);
        load<kVec>(weight + half + i, wb);
        add_offset<kVec>(shape.norm_weight_offset, wa, wb);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          a[j] = wa[j] * (a[j] * rstd);
          b[j] = wb[j] * (b[j] * rstd);
        }
      }
      float first[kVec], second[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        float sine, cosine;
        rotation(inv_freq, i + j, position, shape.rotated_scale, sine, cosine);
        first[j] = a[j] * cosine - b[j] * sine;
        second[j] = b[j] * cosine + a[j] * sine;
      }
      store<kVec>(out + i, first);
      store<kVec>(out + half + i, second);
    }
  }
}

// Shared memory per warp: [3][head_dim] floats — the dq_norm partial, the dk_norm partial, and the current head's
// gradient after the inverse rotation (each lane touches only its own columns, so no synchronisation is needed
// until the warps are combined). partial: [gridDim.x][2·head_dim] (dq_norm then dk_norm), or null.
template <int kVec>
__global__ void qkv_norm_rope_backward_kernel(const bf16* __restrict__ dq, const bf16* __restrict__ dk,
                                              const bf16* __restrict__ dv, const bf16* __restrict__ qkv,
                                              const bf16* __restrict__ q_norm, const bf16* __restrict__ k_norm,
                                              float eps, const float* __restrict__ inv_freq,
                                              const int32_t* __restrict__ positions, bf16* __restrict__ dqkv,
                                              bool accumulate_q, bool accumulate_k, float* __restrict__ partial,
                                              QkvShape shape) {
  gpu::wait_for_previous_kernel();
  extern __shared__ float shared[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int64_t d = shape.head_dim, half = d / 2;
  float* dq_norm_acc = shared + warp * 3 * d;
  float* dk_norm_acc = dq_norm_acc + d;
  float* grad = dk_norm_acc + d;
  for (int64_t i = int64_t(lane) * kVec; i < half; i += 32 * kVec)
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      dq_norm_acc[i + j] = dq_norm_acc[half + i + j] = 0.0f;
      dk_norm_acc[i + j] = dk_norm_acc[half + i + j] = 0.0f;
    }

  const int64_t heads = shape.q_heads + 2 * shape.kv_heads, items = shape.tokens * heads;
  const int64_t warps_in_grid = int64_t(gridDim.x) * kWarpsPerBlock;
  for (int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + warp; item < items; item += warps_in_grid) {
    const HeadIndex at = head_of(item, heads);
    bf16* out = dqkv + qkv_offset(shape, at);
    if (at.head >= shape.q_heads + shape.kv_heads) {
      copy_head<kVec>(dv + (at.token * shape.kv_heads + at.head - shape.q_heads - shape.kv_heads) * d, out, d, lane);
      continue;
    }
    const bool is_q = at.head < shape.q_heads;
    const bf16* grad_out = is_q ? dq + (at.token * shape.q_heads + at.head) * d
                                : dk + (at.token * shape.kv_heads + at.head - shape.q_heads) * d;
    const bf16* weight = is_q ? q_norm : k_norm;

    // The rotation is orthogonal: its backward rotates the gradient by the opposite angle.
    const float position = inv_freq != nullptr ? float(positions[at.token]) : 0.0f;
    for (int64_t i = int64_t(lane) * kVec; i < half; i += 32 * kVec) {
      float ga[kVec], gb[kVec];
      load<kVec>(grad_out + i, ga);
      load<kVec>(grad_out + half + i, gb);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        float sine, cosine;
        rotation(inv_freq, i + j, position, shape.rotated_scale, sine, cosine);
        grad[i + j] = ga[j] * cosine + gb[j] * sine;
        grad[half + i + j] = gb[j] * cosine - ga[j] * sine;
      }
    }
    if (weight == nullptr) {
      for (int64_t i = int64_t(lane) * kVec; i < half; i += 32 * kVec) {
        float ga[kVec], gb[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          ga[j] = grad[i + j];
          gb[j] = grad[half + i + j];
        }
        store<kVec>(out + i, ga);
        store<kVec>(out + half + i, gb);
      }
      continue;
    }

    // y = w ⊙ x·r with r = (mean x² + eps)^-1/2:  dx = r·(w⊙g) − x·r³·⟨w⊙g, x⟩/d,  dw = g ⊙ x·r.
    const bf16* x = qkv + qkv_offset(shape, at);
    float square_sum = 0.0f, projection = 0.0f;
    for (int64_t i = int64_t(lane) * kVec; i < half; i += 32 * kVec) {
      float xa[kVec], xb[kVec], wa[kVec], wb[kVec];
      load<kVec>(x + i, xa);
      load<kVec>(x + half + i, xb);
      load<kVec>(weight + i, wa);
      load<kVec>(weight + half + i, wb);
      add_offset<kVec>(shape.norm_weight_offset, wa, wb);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        square_sum += xa[j] * xa[j] + xb[j] * xb[j];
        projection += wa[j] * grad[i + j] * xa[j] + wb[j] * grad[half + i + j] * xb[j];
      }
    }
    const float rstd = 1.0f / sqrtf(warp_sum(square_sum) / float(d) + eps);
    const float correction = rstd * rstd * rstd * warp_sum(projection) / float(d);
    float* acc = is_q ? dq_norm_acc : dk_norm_acc;
    const bool accumulate = is_q ? accumulate_q : accumulate_k;
    for (int64_t i = int64_t(lane) * kVec; i < half; i += 32 * kVec) {
      float xa[kVec], xb[kVec], wa[kVec], wb[kVec], da[kVec], db[kVec];
      load<kVec>(x + i, xa);
      load<kVec>(x + half + i, xb);
      load<kVec>(weight + i, wa);
      load<kVec>(weight + half + i, wb);
      add_offset<kVec>(shape.norm_weight_offset, wa, wb);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float ga = grad[i + j], gb = grad[half + i + j];
        da[j] = rstd * wa[j] * ga - xa[j] * correction;
        db[j] = rstd * wb[j] * gb - xb[j] * correction;
        if (accumulate) {
          acc[i + j] += ga * xa[j] * rstd;
          acc[half + i + j] += gb * xb[j] * rstd;
        }
      }
      store<kVec>(out + i, da);
      store<kVec>(out + half + i, db);
    }
  }

  if (partial == nullptr) return;
  __syncthreads();
  float* block_partial = partial + int64_t(blockIdx.x) * 2 * d;
  for (int64_t c = threadIdx.x; c < 2 * d; c += blockDim.x) {
    float sum = 0.0f;
    for (int w = 0; w < kWarpsPerBlock; ++w) sum += shared[w * 3 * d + c];
    block_partial[c] = sum;
  }
}

bool pairs_of_two(int64_t head_dim, std::initializer_list<const void*> pointers) {
  if ((head_dim / 2) % 2 != 0) return false;
  for (const void* p : pointers)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 4 != 0) return false;
  return true;
}

int64_t items_of(QkvShape shape) { return shape.tokens * (shape.q_heads + 2 * shape.kv_heads); }

int64_t backward_blocks(QkvShape shape) {
  return std::min((items_of(shape) + kWarpsPerBlock - 1) / kWarpsPerBlock, kBackwardBlocks);
}

}  // namespace

cudaError_t launch_qkv_norm_rope_forward(const void* qkv, const void* q_norm, const void* k_norm, float eps,
                                         const float* inv_freq, const int32_t* positions, void* q, void* k, void* v,
                                         QkvShape shape, cudaStream_t stream) {
  const int64_t items = items_of(shape);
  if (items == 0 || shape.head_dim == 0) return cudaSuccess;
  const unsigned blocks = unsigned(std::min((items + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxForwardBlocks));
  const auto* in = static_cast<const bf16*>(qkv);
  const auto* qn = static_cast<const bf16*>(q_norm);
  const auto* kn = static_cast<const bf16*>(k_norm);
  auto* qp = static_cast<bf16*>(q);
  auto* kp = static_cast<bf16*>(k);
  auto* vp = static_cast<bf16*>(v);
  if (pairs_of_two(shape.head_dim, {qkv, q_norm, k_norm, q, k, v}))
    gpu::launch_dependent(qkv_norm_rope_forward_kernel<2>, blocks, kThreads, 0, stream, in, qn, kn, eps, inv_freq,
                          positions, qp, kp, vp, shape);
  else
    gpu::launch_dependent(qkv_norm_rope_forward_kernel<1>, blocks, kThreads, 0, stream, in, qn, kn, eps, inv_freq,
                          positions, qp, kp, vp, shape);
  return cudaGetLastError();
}

size_t qkv_norm_rope_backward_workspace_bytes(QkvShape shape) {
  return size_t(backward_blocks(shape)) * size_t(2 * shape.head_dim) * sizeof(float);
}

cudaError_t launch_qkv_norm_rope_backward(const void* dq, const void* dk, const void* dv, const void* qkv,
                                          const void* q_norm, const void* k_norm, float eps, const float* inv_freq,
                                          const int32_t* positions, void* dqkv, void* dq_norm, void* dk_norm,
                                          bool dq_norm_is_bf16, bool dk_norm_is_bf16, QkvShape shape, void* workspace,
                                          cudaStream_t stream) {
  const int64_t items = items_of(shape);
  if (items == 0 || shape.head_dim == 0) return cudaSuccess;
  if ((dq_norm != nullptr && q_norm == nullptr) || (dk_norm != nullptr && k_norm == nullptr))
    return cudaErrorInvalidValue;
  const bool accumulate_q = dq_norm != nullptr, accumulate_k = dk_norm != nullptr;
  float* partial = accumulate_q || accumulate_k ? static_cast<float*>(workspace) : nullptr;
  if (partial == nullptr && (accumulate_q || accumulate_k)) return cudaErrorInvalidValue;

  const int64_t blocks = backward_blocks(shape);
  const size_t shared = size_t(kWarpsPerBlock) * 3 * size_t(shape.head_dim) * sizeof(float);
  const auto* dqp = static_cast<const bf16*>(dq);
  const auto* dkp = static_cast<const bf16*>(dk);
  const auto* dvp = static_cast<const bf16*>(dv);
  const auto* in = static_cast<const bf16*>(qkv);
  const auto* qn = static_cast<const bf16*>(q_norm);
  const auto* kn = static_cast<const bf16*>(k_norm);
  auto* out = static_cast<bf16*>(dqkv);
  if (pairs_of_two(shape.head_dim, {dq, dk, dv, qkv, q_norm, k_norm, dqkv}))
    gpu::launch_dependent(qkv_norm_rope_backward_kernel<2>, unsigned(blocks), kThreads, shared, stream, dqp, dkp, dvp,
                          in, qn, kn, eps, inv_freq, positions, out, accumulate_q, accumulate_k, partial, shape);
  else
    gpu::launch_dependent(qkv_norm_rope_backward_kernel<1>, unsigned(blocks), kThreads, shared, stream, dqp, dkp, dvp,
                          in, qn, kn, eps, inv_freq, positions, out, accumulate_q, accumulate_k, partial, shape);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  const int64_t d = shape.head_dim;
  if (accumulate_q) {
    status = launch_add_column_sums(partial, blocks, 2 * d, d, dq_norm, dq_norm_is_bf16, stream);
    if (status != cudaSuccess) return status;
  }
  if (accumulate_k) status = launch_add_column_sums(partial + d, blocks, 2 * d, d, dk_norm, dk_norm_is_bf16, stream);
  return status;
}

}  // namespace moetune::ops::cuda
