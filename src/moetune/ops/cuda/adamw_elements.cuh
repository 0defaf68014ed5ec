// The per-element half of the fused AdamW kernel (adamw.cu), shared with the lazy row update (adamw_rows.cu) so
// that both run the same code on the same numbers: packed loads and stores of bf16 and f32, rounding to bf16, and
// one step of kWidth elements in registers (ops/adamw_math.h's adamw_element, then the rounding into storage).
// The lazy update replays steps with this very function, which is what makes it bit-identical to the eager one;
// both files are compiled without FMA contraction (src/moetune/CMakeLists.txt). Included by .cu files only.
#pragma once

#include <cuda_bf16.h>

#include "moetune/core/half.h"
#include "moetune/ops/cuda/adamw_common.cuh"
#include "moetune/ops/cuda/adamw_kernels.h"

namespace moetune::ops::cuda::adamw_elements {

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

// Round to nearest even into bf16: with kHardware two at a time by the conversion instruction (cvt.rn.bf16x2.f32,
// one instruction a pair where f32_to_bf16 takes several an element; the same bits for every number, and a NaN
// stays a NaN though not the same one), else f32_to_bf16.
template <bool kHardware, int kWidth>
__device__ __forceinline__ void round_bf16(const float (&values)[kWidth], uint16_t (&bits)[kWidth]) {
  if constexpr (kHardware && kWidth % 2 == 0) {
#pragma unroll
    for (int k = 0; k < kWidth; k += 2) {
      const __nv_bfloat162 pair = __floats2bfloat162_rn(values[k], values[k + 1]);
      bits[k] = __bfloat16_as_ushort(pair.x);
      bits[k + 1] = __bfloat16_as_ushort(pair.y);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) bits[k] = f32_to_bf16(values[k]);
  }
}

// One AdamW step of kWidth elements (index: the first one's, in its tensor) in registers: p, m, v hold what the
// storage holds (the fp32 master copy, or the bf16 values widened), g the scaled gradient. Afterwards p_bits is
// the bf16 parameter to store, and in the bf16 modes m_bits / v_bits the moments; p, m and v are left as the
// storage will hold them once stored (in the bf16 modes: the rounded values, widened again), so that a caller
// may take another step on them without a round trip through memory and get the same bits.
template <AdamWStorage kStorage, bool kHardwareRounding, bool kSkipUntouched, int kWidth>
__device__ __forceinline__ void step_in_registers(float (&p)[kWidth], const float (&g)[kWidth], float (&m)[kWidth],
                                                  float (&v)[kWidth], const AdamWConstants& constants, uint64_t key,
                                                  int64_t index, uint16_t (&p_bits)[kWidth],
                                                  uint16_t (&m_bits)[kWidth], uint16_t (&v_bits)[kWidth]) {
#pragma unroll
  for (int k = 0; k < kWidth; ++k) adamw_element<kSkipUntouched>(p[k], g[k], m[k], v[k], constants);
  if constexpr (kStorage == AdamWStorage::F32Master) {
    round_bf16<kHardwareRounding>(p, p_bits);
  } else {
    if constexpr (kStorage == AdamWStorage::Bf16StochasticRounding) {
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        // One 64-bit draw gives three independent 16-bit roundings.
        const uint64_t random = element_random(key, index + k);
        p_bits[k] = f32_to_bf16_stochastic(p[k], uint32_t(random & 0xffffu));
        m_bits[k] = f32_to_bf16_stochastic(m[k], uint32_t((random >> 16) & 0xffffu));
        v_bits[k] = f32_to_bf16_stochastic(v[k], uint32_t((random >> 32) & 0xffffu));
      }
    } else {
      round_bf16<kHardwareRounding>(p, p_bits);
      round_bf16<kHardwareRounding>(m, m_bits);
      round_bf16<kHardwareRounding>(v, v_bits);
    }
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      p[k] = bf16_to_f32(p_bits[k]);
      m[k] = bf16_to_f32(m_bits[k]);
      v[k] = bf16_to_f32(v_bits[k]);
    }
  }
}

// Loads the state of kWidth elements at `index` (the master copy for the parameter in F32Master).
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void load_state(const AdamWTensorPointers& t, int64_t index, float (&p)[kWidth],
                                           float (&m)[kWidth], float (&v)[kWidth]) {
  if constexpr (kStorage == AdamWStorage::F32Master) {
    load_f32<kWidth>(t.master + index, p);
    load_f32<kWidth>(static_cast<const float*>(t.exp_avg) + index, m);
    load_f32<kWidth>(static_cast<const float*>(t.exp_avg_sq) + index, v);
  } else {
    load_bf16<kWidth>(t.param + index, p);
    load_bf16<kWidth>(static_cast<const uint16_t*>(t.exp_avg) + index, m);
    load_bf16<kWidth>(static_cast<const uint16_t*>(t.exp_avg_sq) + index, v);
  }
}

// Stores what step_in_registers left: the bf16 parameter, and the master copy and moments as kept.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void store_state(const AdamWTensorPointers& t, int64_t index, const float (&p)[kWidth],
                                            const float (&m)[kWidth], const float (&v)[kWidth],
                                            const uint16_t (&p_bits)[kWidth], const uint16_t (&m_bits)[kWidth],
                                            const uint16_t (&v_bits)[kWidth]) {
  if constexpr (kStorage == AdamWStorage::F32Master) {
    store_f32<kWidth>(t.master + index, p);
    store_f32<kWidth>(static_cast<float*>(t.exp_avg) + index, m);
    store_f32<kWidth>(static_cast<float*>(t.exp_avg_sq) + index, v);
  } else {
    store_bf16<kWidth>(static_cast<uint16_t*>(t.exp_avg) + index, m_bits);
    store_bf16<kWidth>(static_cast<uint16_t*>(t.exp_avg_sq) + index, v_bits);
  }
  store_bf16<kWidth>(t.param + index, p_bits);
}

}  // namespace moetune::ops::cuda::adamw_elements
