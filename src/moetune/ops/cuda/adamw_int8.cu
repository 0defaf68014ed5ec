// Fused multi-tensor AdamW with 8-bit moments (bitsandbytes' blockwise 8-bit AdamW): per block of
// kAdamWStateBlock elements one warp dequantizes both moments, updates them and the parameter in fp32
// (ops/adamw_math.h), takes the block's new absmax values with a warp reduction and writes the nearest codes
// (ops/blockwise_quant_math.h), found by bucket (bucketed_nearest_code: one table load and a comparison or two per
// moment, where the binary search over 255 midpoints made 8 dependent shared-memory loads; measured on the H200,
// see docs/benchmarks.md). This file is compiled without FMA contraction (src/moetune/CMakeLists.txt), so
// each element's arithmetic is train::AdamW's, operation for operation, and the codes, absmax values and fp32
// master weights match the CPU reference bit for bit.
//
// Lanes own 8 contiguous elements of a full block (16-byte loads and stores), where the first version strided
// them by 32 with scalar accesses: 1.70 ms against 0.49 ms for bf16 moments over 128M elements on the H200 (633
// against 3826 GB/s), though the 8-bit step moves 8 bytes per element where the bf16 one moves 14.
//
// Bytes moved per element: reads grad 2 + both codes 2 (+ master 4, or param 2), writes both codes 2 + param 2
// (+ master 4), the absmax values 1/32: about 8 B (bf16 weights) or 16 B (fp32 master) against 14 / 28 B with
// bf16 / f32 moments.
#include "moetune/core/half.h"
#include "moetune/ops/blockwise_quant_math.h"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/adamw_common.cuh"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kPerLane = kAdamWStateBlock / kWarp;
constexpr int kMapSize = 256;
static_assert(multi_tensor::kChunkElements % kAdamWStateBlock == 0, "a chunk holds whole quantization blocks");

using AdamWInt8Table = AdamWTableOf<AdamWInt8TensorPointers, 320>;
static_assert(sizeof(AdamWInt8Table) + sizeof(AdamWScalars) + 3 * sizeof(const float*) + sizeof(DynamicCodes) <=
              multi_tensor::kMaxKernelParameterBytes);

__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// The maps, their midpoints and the midpoints' buckets, in shared memory for the searches (16 KB).
struct Codes {
  float signed_map[kMapSize], unsigned_map[kMapSize];
  float signed_midpoints[kMapSize - 1], unsigned_midpoints[kMapSize - 1];
  CodeBucket buckets[3 * kCodeBuckets];  // signed map: positive, negative side; unsigned map: positive side
};

__device__ void load_codes(Codes& codes, DynamicCodes source) {
  for (int i = threadIdx.x; i < kMapSize; i += blockDim.x) {
    codes.signed_map[i] = source.maps[i];
    codes.unsigned_map[i] = source.maps[kMapSize + i];
  }
  for (int i = threadIdx.x; i < 3 * kCodeBuckets; i += blockDim.x) codes.buckets[i] = source.buckets[i];
  __syncthreads();
  for (int i = threadIdx.x; i < kMapSize - 1; i += blockDim.x) {
    codes.signed_midpoints[i] = code_midpoint(codes.signed_map[i], codes.signed_map[i + 1]);
    codes.unsigned_midpoints[i] = code_midpoint(codes.unsigned_map[i], codes.unsigned_map[i + 1]);
  }
  __syncthreads();
}

// Lane l's elements of a block: with kContiguous the 8 from 8l (full blocks of 16-byte-aligned tensors: one 16-byte
// load of parameters and gradients and one 8-byte load of each moment's codes per lane), else l, l + 32, ... (the
// partial last block, or misaligned tensors). Each element's arithmetic is the same either way.
template <bool kContiguous>
__device__ __forceinline__ int element_of(int lane, int k) {
  return kContiguous ? lane * kPerLane + k : lane + k * kWarp;
}

template <AdamWStorage kStorage, bool kContiguous>
__device__ void load_block(const AdamWInt8TensorPointers& t, int64_t first, int size, const Codes& codes, float m_absmax,
                           float v_absmax, float (&p)[kPerLane], float (&g)[kPerLane], float (&m)[kPerLane],
                           float (&v)[kPerLane]) {
  const int lane = threadIdx.x % kWarp;
  if constexpr (kContiguous) {
    const int64_t at = first + lane * kPerLane;
    static_assert(kPerLane == 8, "one 16-byte load of bf16 values per lane");
    const uint4 grads = *reinterpret_cast<const uint4*>(t.grad + at);
    const uint2 m_codes = *reinterpret_cast<const uint2*>(t.exp_avg + at);
    const uint2 v_codes = *reinterpret_cast<const uint2*>(t.exp_avg_sq + at);
    const uint16_t* grad16 = reinterpret_cast<const uint16_t*>(&grads);
    const uint8_t* m8 = reinterpret_cast<const uint8_t*>(&m_codes);
    const uint8_t* v8 = reinterpret_cast<const uint8_t*>(&v_codes);
    if constexpr (kStorage == AdamWStorage::F32Master) {
      const float4 low = *reinterpret_cast<const float4*>(t.master + at);
      const float4 high = *reinterpret_cast<const float4*>(t.master + at + 4);
      p[0] = low.x, p[1] = low.y, p[2] = low.z, p[3] = low.w, p[4] = high.x, p[5] = high.y, p[6] = high.z, p[7] = high.w;
    } else {
      const uint4 params = *reinterpret_cast<const uint4*>(t.param + at);
      const uint16_t* param16 = reinterpret_cast<const uint16_t*>(&params);
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) p[k] = bf16_to_f32(param16[k]);
    }
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      g[k] = bf16_to_f32(grad16[k]);
      m[k] = codes.signed_map[m8[k]] * m_absmax;
      v[k] = codes.unsigned_map[v8[k]] * v_absmax;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int i = element_of<false>(lane, k);
      p[k] = g[k] = m[k] = v[k] = 0;
      if (i >= size) continue;
      const int64_t index = first + i;
      p[k] = kStorage == AdamWStorage::F32Master ? t.master[index] : bf16_to_f32(t.param[index]);
      g[k] = bf16_to_f32(t.grad[index]);
      m[k] = codes.signed_map[t.exp_avg[index]] * m_absmax;
      v[k] = codes.unsigned_map[t.exp_avg_sq[index]] * v_absmax;
    }
  }
}

template <AdamWStorage kStorage>
__device__ __forceinline__ uint16_t stored_param(float p, uint64_t key, int64_t index) {
  if constexpr (kStorage == AdamWStorage::Bf16StochasticRounding)
    return f32_to_bf16_stochastic(p, uint32_t(element_random(key, index) & 0xffffu));
  else
    return f32_to_bf16(p);
}

// One quantization block of one tensor, by one warp; adds this lane's unscaled g² to `squares`.
template <AdamWStorage kStorage, bool kContiguous>
__device__ void update_block(const AdamWInt8TensorPointers& t, int64_t first, float grad_scale, const AdamWScalars& s,
                             uint64_t key, const Codes& codes, float& squares) {
  const int lane = threadIdx.x % kWarp;
  const int64_t block = first / kAdamWStateBlock;
  const int size = int(t.numel - first < kAdamWStateBlock ? t.numel - first : kAdamWStateBlock);
  float p[kPerLane], g[kPerLane], m[kPerLane], v[kPerLane];
  load_block<kStorage, kContiguous>(t, first, size, codes, t.exp_avg_absmax[block], t.exp_avg_sq_absmax[block], p, g, m, v);
  float m_max = 0, v_max = 0;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    if (element_of<kContiguous>(lane, k) >= size) continue;
    squares += g[k] * g[k];
    adamw_element(p[k], g[k] * grad_scale, m[k], v[k], s.constants);
    m_max = fmaxf(m_max, fabsf(m[k]));
    v_max = fmaxf(v_max, fabsf(v[k]));
  }
  m_max = warp_max(m_max);
  v_max = warp_max(v_max);
  const bool full = size == kAdamWStateBlock;
  const BlockScale m_scale = block_scale(m_max, full), v_scale = block_scale(v_max, full);
  uint8_t m_codes[kPerLane], v_codes[kPerLane];
  uint16_t params[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    m_codes[k] = bucketed_nearest_code(codes.signed_midpoints, codes.buckets, codes.buckets + kCodeBuckets,
                                       m_scale.unit(m[k]));
    const float v_unit = v_scale.unit(v[k]);
    v_codes[k] = nonzero_for_positive(
        bucketed_nearest_code(codes.unsigned_midpoints, codes.buckets + 2 * kCodeBuckets, nullptr, v_unit), v_unit);
    params[k] = stored_param<kStorage>(p[k], key, first + element_of<kContiguous>(lane, k));
  }
  if constexpr (kContiguous) {
    const int64_t at = first + lane * kPerLane;
    *reinterpret_cast<uint2*>(t.exp_avg + at) = *reinterpret_cast<const uint2*>(m_codes);
    *reinterpret_cast<uint2*>(t.exp_avg_sq + at) = *reinterpret_cast<const uint2*>(v_codes);
    *reinterpret_cast<uint4*>(t.param + at) = *reinterpret_cast<const uint4*>(params);
    if constexpr (kStorage == AdamWStorage::F32Master) {
      *reinterpret_cast<float4*>(t.master + at) = make_float4(p[0], p[1], p[2], p[3]);
      *reinterpret_cast<float4*>(t.master + at + 4) = make_float4(p[4], p[5], p[6], p[7]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int i = element_of<false>(lane, k);
      if (i >= size) continue;
      const int64_t index = first + i;
      t.exp_avg[index] = m_codes[k];
      t.exp_avg_sq[index] = v_codes[k];
      t.param[index] = params[k];
      if constexpr (kStorage == AdamWStorage::F32Master) t.master[index] = p[k];
    }
  }
  if (lane == 0) {
    t.exp_avg_absmax[block] = m_max;
    t.exp_avg_sq_absmax[block] = v_max;
  }
}

// Whether a tensor's full blocks can take the contiguous path: its pointers aligned for the vector loads (every
// block starts a multiple of 256 elements in).
__device__ __forceinline__ bool vector_aligned(const AdamWInt8TensorPointers& t) {
  const auto bits = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  return ((bits(t.param) | bits(t.grad) | bits(t.master)) % 16 == 0) && ((bits(t.exp_avg) | bits(t.exp_avg_sq)) % 8 == 0);
}

template <AdamWStorage kStorage>
__global__ void __launch_bounds__(multi_tensor::kThreads)
    adamw_int8_kernel(const __grid_constant__ AdamWInt8Table table, float* __restrict__ norm_partials,
                      const AdamWScalars scalars, const float* __restrict__ grad_scale, const DynamicCodes source) {
  gpu::wait_for_previous_kernel();
  __shared__ Codes codes;
  load_codes(codes, source);
  const float scale = grad_scale ? *grad_scale : 1.0f;
  const int warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for_each_chunk<kStorage>(table, scalars, norm_partials, [&](const AdamWInt8TensorPointers& t,
                                                              multi_tensor::Range range, uint64_t key) {
    float squares = 0.0f;
    const bool aligned = vector_aligned(t);
    for (int64_t first = range.begin + int64_t(warp) * kAdamWStateBlock; first < range.end;
         first += int64_t(warps) * kAdamWStateBlock) {
      if (aligned && t.numel - first >= kAdamWStateBlock)
        update_block<kStorage, true>(t, first, scale, scalars, key, codes, squares);
      else
        update_block<kStorage, false>(t, first, scale, scalars, key, codes, squares);
    }
    return squares;
  });
}

}  // namespace

cudaError_t launch_adamw_int8(AdamWStorage storage, const AdamWInt8TensorPointers* tensors, int64_t count,
                              const AdamWScalars& scalars, const float* grad_scale, DynamicCodes codes,
                              float* norm_partials, cudaStream_t stream) {
  return launch_adamw_tables<AdamWInt8Table>(
      storage, tensors, count, /*first_position=*/0,
      [](auto storage_constant) { return adamw_int8_kernel<decltype(storage_constant)::value>; }, norm_partials,
      stream, scalars, grad_scale, codes);
}

}  // namespace moetune::ops::cuda
