// Fused multi-tensor AdamW with 8-bit moments (bitsandbytes' blockwise 8-bit AdamW): per block of
// kAdamWStateBlock elements one warp dequantizes both moments, updates them and the parameter in fp32
// (ops/adamw_math.h), takes the block's new absmax values with a warp reduction and writes the nearest codes
// (ops/blockwise_quant_math.h), found by bucket (bucketed_nearest_code: one table load and a comparison or two per
// moment, where the binary search over 255 midpoints made 8 dependent shared-memory loads; measured on the H200,
// see docs/benchmarks.md). This file is compiled without FMA contraction (src/moetune/CMakeLists.txt), so
// each element's arithmetic is train::AdamW's, operation for operation, and the codes, absmax values and fp32
// master weights match the CPU reference bit for bit.
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
static_assert(sizeof(AdamWInt8Table) + sizeof(AdamWScalars) + 2 * sizeof(const float*) <=
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

// One quantization block of one tensor, by one warp: lane l holds elements l, l + 32, ... of the block.
template <AdamWStorage kStorage>
__device__ void update_block(const AdamWInt8TensorPointers& t, int64_t first, float grad_scale, const AdamWScalars& s,
                             uint64_t key, const Codes& codes) {
  const int lane = threadIdx.x % kWarp;
  const int64_t block = first / kAdamWStateBlock;
  const int size = int(t.numel - first < kAdamWStateBlock ? t.numel - first : kAdamWStateBlock);
  const float m_absmax = t.exp_avg_absmax[block], v_absmax = t.exp_avg_sq_absmax[block];
  float p[kPerLane], m[kPerLane], v[kPerLane];
  float m_max = 0, v_max = 0;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int i = lane + k * kWarp;
    m[k] = v[k] = p[k] = 0;
    if (i >= size) continue;
    const int64_t index = first + i;
    p[k] = kStorage == AdamWStorage::F32Master ? t.master[index] : bf16_to_f32(t.param[index]);
    m[k] = codes.signed_map[t.exp_avg[index]] * m_absmax;
    v[k] = codes.unsigned_map[t.exp_avg_sq[index]] * v_absmax;
    adamw_element(p[k], bf16_to_f32(t.grad[index]) * grad_scale, m[k], v[k], s.constants);
    m_max = fmaxf(m_max, fabsf(m[k]));
    v_max = fmaxf(v_max, fabsf(v[k]));
  }
  m_max = warp_max(m_max);
  v_max = warp_max(v_max);
  const bool full = size == kAdamWStateBlock;
  const BlockScale m_scale = block_scale(m_max, full), v_scale = block_scale(v_max, full);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int i = lane + k * kWarp;
    if (i >= size) continue;
    const int64_t index = first + i;
    t.exp_avg[index] = bucketed_nearest_code(codes.signed_midpoints, codes.buckets, codes.buckets + kCodeBuckets,
                                             m_scale.unit(m[k]));
    const float v_unit = v_scale.unit(v[k]);
    t.exp_avg_sq[index] = nonzero_for_positive(
        bucketed_nearest_code(codes.unsigned_midpoints, codes.buckets + 2 * kCodeBuckets, nullptr, v_unit), v_unit);
    if constexpr (kStorage == AdamWStorage::F32Master) {
      t.master[index] = p[k];
      t.param[index] = f32_to_bf16(p[k]);
    } else if constexpr (kStorage == AdamWStorage::Bf16StochasticRounding) {
      t.param[index] = f32_to_bf16_stochastic(p[k], uint32_t(element_random(key, index) & 0xffffu));
    } else {
      t.param[index] = f32_to_bf16(p[k]);
    }
  }
  if (lane == 0) {
    t.exp_avg_absmax[block] = m_max;
    t.exp_avg_sq_absmax[block] = v_max;
  }
}

template <AdamWStorage kStorage>
__global__ void __launch_bounds__(multi_tensor::kThreads)
    adamw_int8_kernel(const __grid_constant__ AdamWInt8Table table, const AdamWScalars scalars,
                      const float* __restrict__ grad_scale, const DynamicCodes source) {
  __shared__ Codes codes;
  load_codes(codes, source);
  const float scale = grad_scale ? *grad_scale : 1.0f;
  const int warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  for_each_chunk<kStorage>(table, scalars, [&](const AdamWInt8TensorPointers& t, multi_tensor::Range range, uint64_t key) {
    for (int64_t first = range.begin + int64_t(warp) * kAdamWStateBlock; first < range.end;
         first += int64_t(warps) * kAdamWStateBlock)
      update_block<kStorage>(t, first, scale, scalars, key, codes);
  });
}

}  // namespace

cudaError_t launch_adamw_int8(AdamWStorage storage, const AdamWInt8TensorPointers* tensors, int64_t count,
                              const AdamWScalars& scalars, const float* grad_scale, DynamicCodes codes,
                              cudaStream_t stream) {
  return launch_adamw_tables<AdamWInt8Table>(
      storage, tensors, count,
      [](auto storage_constant) { return adamw_int8_kernel<decltype(storage_constant)::value>; }, stream, scalars,
      grad_scale, codes);
}

}  // namespace moetune::ops::cuda
