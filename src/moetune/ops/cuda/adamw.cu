// Fused multi-tensor AdamW (torch.optim.AdamW: decoupled weight decay, bias correction), one pass over each
// element: gradient scale, decay, both moments, the update, and the rounding back into storage. The per-element
// arithmetic is train::AdamW's (ops/adamw_math.h), in fp32.
//
// The step is memory-bound; bytes moved per element:
//   F32Master: reads grad 2 + master 4 + exp_avg 4 + exp_avg_sq 4, writes master 4 + moments 8 + param 2 = 28 B
//   bf16 modes: reads param, grad, exp_avg, exp_avg_sq (2 B each), writes param and both moments = 14 B
// so 3.1 B parameters take ~20 ms (fp32 master) or ~10 ms (bf16) at the H200's ~4.3 TB/s.
#include "moetune/core/half.h"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/adamw_common.cuh"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {
namespace {

using AdamWTable = AdamWTableOf<AdamWTensorPointers, 384>;
static_assert(sizeof(AdamWTable) + sizeof(AdamWScalars) + sizeof(const float*) <=
              multi_tensor::kMaxKernelParameterBytes);

// Loads and stores of kWidth consecutive elements: 8 with 16-byte accesses (the caller guarantees alignment),
// or 1.
template <int kWidth>
__device__ __forceinline__ void load_bf16(const uint16_t* source, float (&out)[kWidth]) {
  if constexpr (kWidth == 8) {
    const uint4 packed = *reinterpret_cast<const uint4*>(source);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = bf16_to_f32(uint16_t(words[k] & 0xffffu));
      out[2 * k + 1] = bf16_to_f32(uint16_t(words[k] >> 16));
    }
  } else {
    out[0] = bf16_to_f32(*source);
  }
}

template <int kWidth>
__device__ __forceinline__ void store_bf16(uint16_t* destination, const uint16_t (&bits)[kWidth]) {
  if constexpr (kWidth == 8) {
    uint4 packed;
    packed.x = uint32_t(bits[0]) | (uint32_t(bits[1]) << 16);
    packed.y = uint32_t(bits[2]) | (uint32_t(bits[3]) << 16);
    packed.z = uint32_t(bits[4]) | (uint32_t(bits[5]) << 16);
    packed.w = uint32_t(bits[6]) | (uint32_t(bits[7]) << 16);
    *reinterpret_cast<uint4*>(destination) = packed;
  } else {
    *destination = bits[0];
  }
}

template <int kWidth>
__device__ __forceinline__ void load_f32(const float* source, float (&out)[kWidth]) {
  if constexpr (kWidth == 8) {
    const float4 low = reinterpret_cast<const float4*>(source)[0], high = reinterpret_cast<const float4*>(source)[1];
    out[0] = low.x, out[1] = low.y, out[2] = low.z, out[3] = low.w;
    out[4] = high.x, out[5] = high.y, out[6] = high.z, out[7] = high.w;
  } else {
    out[0] = *source;
  }
}

template <int kWidth>
__device__ __forceinline__ void store_f32(float* destination, const float (&values)[kWidth]) {
  if constexpr (kWidth == 8) {
    reinterpret_cast<float4*>(destination)[0] = make_float4(values[0], values[1], values[2], values[3]);
    reinterpret_cast<float4*>(destination)[1] = make_float4(values[4], values[5], values[6], values[7]);
  } else {
    *destination = values[0];
  }
}

// Updates elements [index, index + kWidth) of one tensor.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void update_elements(const AdamWTensorPointers& t, int64_t index, float grad_scale,
                                                const AdamWScalars& s, uint64_t key) {
  float p[kWidth], g[kWidth], m[kWidth], v[kWidth];
  load_bf16<kWidth>(t.grad + index, g);
  if constexpr (kStorage == AdamWStorage::F32Master) {
    load_f32<kWidth>(t.master + index, p);
    load_f32<kWidth>(static_cast<const float*>(t.exp_avg) + index, m);
    load_f32<kWidth>(static_cast<const float*>(t.exp_avg_sq) + index, v);
  } else {
    load_bf16<kWidth>(t.param + index, p);
    load_bf16<kWidth>(static_cast<const uint16_t*>(t.exp_avg) + index, m);
    load_bf16<kWidth>(static_cast<const uint16_t*>(t.exp_avg_sq) + index, v);
  }
#pragma unroll
  for (int k = 0; k < kWidth; ++k) adamw_element(p[k], g[k] * grad_scale, m[k], v[k], s.constants);

  uint16_t p_bits[kWidth];
  if constexpr (kStorage == AdamWStorage::F32Master) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) p_bits[k] = f32_to_bf16(p[k]);
    store_f32<kWidth>(t.master + index, p);
    store_f32<kWidth>(static_cast<float*>(t.exp_avg) + index, m);
    store_f32<kWidth>(static_cast<float*>(t.exp_avg_sq) + index, v);
  } else {
    uint16_t m_bits[kWidth], v_bits[kWidth];
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      if constexpr (kStorage == AdamWStorage::Bf16StochasticRounding) {
        // One 64-bit draw gives three independent 16-bit roundings.
        const uint64_t random = element_random(key, index + k);
        p_bits[k] = f32_to_bf16_stochastic(p[k], uint32_t(random & 0xffffu));
        m_bits[k] = f32_to_bf16_stochastic(m[k], uint32_t((random >> 16) & 0xffffu));
        v_bits[k] = f32_to_bf16_stochastic(v[k], uint32_t((random >> 32) & 0xffffu));
      } else {
        p_bits[k] = f32_to_bf16(p[k]);
        m_bits[k] = f32_to_bf16(m[k]);
        v_bits[k] = f32_to_bf16(v[k]);
      }
    }
    store_bf16<kWidth>(static_cast<uint16_t*>(t.exp_avg) + index, m_bits);
    store_bf16<kWidth>(static_cast<uint16_t*>(t.exp_avg_sq) + index, v_bits);
  }
  store_bf16<kWidth>(t.param + index, p_bits);
}

template <AdamWStorage kStorage>
__global__ void __launch_bounds__(multi_tensor::kThreads)
    adamw_kernel(const __grid_constant__ AdamWTable table, const AdamWScalars scalars,
                 const float* __restrict__ grad_scale) {
  constexpr int kVector = multi_tensor::kVectorElements;
  const float scale = grad_scale ? *grad_scale : 1.0f;
  for_each_chunk<kStorage>(table, scalars, [&](const AdamWTensorPointers& t, multi_tensor::Range range, uint64_t key) {
    int64_t scalar_begin = range.begin;
    if (multi_tensor::all_aligned_16(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.master)) {
      const int64_t vector_end = range.begin + (range.end - range.begin) / kVector * kVector;
      for (int64_t i = range.begin + int64_t(threadIdx.x) * kVector; i < vector_end; i += int64_t(blockDim.x) * kVector)
        update_elements<kStorage, kVector>(t, i, scale, scalars, key);
      scalar_begin = vector_end;
    }
    for (int64_t i = scalar_begin + threadIdx.x; i < range.end; i += blockDim.x)
      update_elements<kStorage, 1>(t, i, scale, scalars, key);
  });
}

}  // namespace

cudaError_t launch_adamw(AdamWStorage storage, const AdamWTensorPointers* tensors, int64_t count,
                         const AdamWScalars& scalars, const float* grad_scale, cudaStream_t stream) {
  return launch_adamw_tables<AdamWTable>(
      storage, tensors, count, [](auto storage_constant) { return adamw_kernel<decltype(storage_constant)::value>; },
      stream, scalars, grad_scale);
}

}  // namespace moetune::ops::cuda
