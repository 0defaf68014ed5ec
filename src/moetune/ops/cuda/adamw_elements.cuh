// The fused AdamW kernels' work on a few consecutive elements of one tensor (adamw.cu's kernels, whichever way
// their operands reach registers, and the lazy row update's, adamw_rows.cu): the operands' conversion to fp32,
// train::AdamW's update (ops/adamw_math.h), the rounding back into storage and the stores. Every one of those
// kernels steps its elements with step_in_registers, which is what makes their bits one another's: the lazy update
// replays the steps a row missed with it. Included by adamw.cu and adamw_rows.cu only (both compiled with
// --fmad=false: src/moetune/CMakeLists.txt).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "moetune/core/half.h"
#include "moetune/ops/cuda/adamw_common.cuh"
#include "moetune/ops/cuda/adamw_kernels.h"

namespace moetune::ops::cuda {

// Loads and stores of kWidth consecutive elements: 8 with 16-byte accesses (the caller guarantees alignment),
// or 1. The sources may be global or shared memory.
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

// The stored type of the parameter as the update reads it (the master copy for F32Master) and of the moments.
template <AdamWStorage kStorage>
using AdamWStateType = std::conditional_t<kStorage == AdamWStorage::F32Master, float, uint16_t>;

// kWidth elements' operands in fp32: the parameter (or master copy), the gradient and both moments.
template <int kWidth>
struct AdamWOperands {
  float p[kWidth], g[kWidth], m[kWidth], v[kWidth];
};

// The bf16 bits step_in_registers leaves to store: the parameter's, and in the bf16 modes the moments'.
template <int kWidth>
struct AdamWBits {
  uint16_t p[kWidth], m[kWidth], v[kWidth];
};

// Loads kWidth elements' state (p, m, v) from where `state` (the parameter or master copy), `exp_avg` and
// `exp_avg_sq` point (global memory, or a block's copy of it in shared memory).
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void load_state(const AdamWStateType<kStorage>* state,
                                           const AdamWStateType<kStorage>* exp_avg,
                                           const AdamWStateType<kStorage>* exp_avg_sq, AdamWOperands<kWidth>& o) {
  if constexpr (kStorage == AdamWStorage::F32Master) {
    load_f32<kWidth>(state, o.p);
    load_f32<kWidth>(exp_avg, o.m);
    load_f32<kWidth>(exp_avg_sq, o.v);
  } else {
    load_bf16<kWidth>(state, o.p);
    load_bf16<kWidth>(exp_avg, o.m);
    load_bf16<kWidth>(exp_avg_sq, o.v);
  }
}

// Loads kWidth elements' operands: the gradient from `grad`, the state as load_state.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void load_operands(const uint16_t* grad, const AdamWStateType<kStorage>* state,
                                              const AdamWStateType<kStorage>* exp_avg,
                                              const AdamWStateType<kStorage>* exp_avg_sq, AdamWOperands<kWidth>& o) {
  load_bf16<kWidth>(grad, o.g);
  load_state<kStorage, kWidth>(state, exp_avg, exp_avg_sq, o);
}

// What a tensor's update starts from: the fp32 master copy, or the bf16 parameter itself.
template <AdamWStorage kStorage>
__device__ __forceinline__ const AdamWStateType<kStorage>* updated_state(const AdamWTensorPointers& t) {
  if constexpr (kStorage == AdamWStorage::F32Master) return t.master;
  else return t.param;
}

// The state of elements [index, index + kWidth) of one tensor, from global memory (o.g untouched).
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void load_state(const AdamWTensorPointers& t, int64_t index, AdamWOperands<kWidth>& o) {
  using State = AdamWStateType<kStorage>;
  load_state<kStorage, kWidth>(updated_state<kStorage>(t) + index, static_cast<const State*>(t.exp_avg) + index,
                               static_cast<const State*>(t.exp_avg_sq) + index, o);
}

// The operands of elements [index, index + kWidth) of one tensor, from global memory.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void load_operands(const AdamWTensorPointers& t, int64_t index, AdamWOperands<kWidth>& o) {
  using State = AdamWStateType<kStorage>;
  load_operands<kStorage, kWidth>(t.grad + index, updated_state<kStorage>(t) + index,
                                  static_cast<const State*>(t.exp_avg) + index,
                                  static_cast<const State*>(t.exp_avg_sq) + index, o);
}

// One AdamW step of kWidth elements (index: the first one's, in its tensor; key: the stochastic rounding's) in
// registers: o.p, o.m and o.v hold what the storage holds (the fp32 master copy, or the bf16 values widened), o.g
// the unscaled gradient, whose g² it adds to `squares`. Afterwards o.p, o.m and o.v hold the updated fp32 values
// and `bits` the bf16 parameter to store, and in the bf16 modes the moments (store_state stores them).
template <AdamWStorage kStorage, bool kHardwareRounding, bool kSkipUntouched, int kWidth>
__device__ __forceinline__ void step_in_registers(AdamWOperands<kWidth>& o, float grad_scale,
                                                  const AdamWConstants& constants, uint64_t key, int64_t index,
                                                  AdamWBits<kWidth>& bits, float& squares) {
  float(&p)[kWidth] = o.p;
  float(&g)[kWidth] = o.g;
  float(&m)[kWidth] = o.m;
  float(&v)[kWidth] = o.v;
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    squares += g[k] * g[k];
    adamw_element<kSkipUntouched>(p[k], g[k] * grad_scale, m[k], v[k], constants);
  }

  if constexpr (kStorage == AdamWStorage::F32Master) {
    round_bf16<kHardwareRounding>(p, bits.p);
  } else {
    if constexpr (kStorage == AdamWStorage::Bf16StochasticRounding) {
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        // One 64-bit draw gives three independent 16-bit roundings.
        const uint64_t random = element_random(key, index + k);
        bits.p[k] = f32_to_bf16_stochastic(p[k], uint32_t(random & 0xffffu));
        bits.m[k] = f32_to_bf16_stochastic(m[k], uint32_t((random >> 16) & 0xffffu));
        bits.v[k] = f32_to_bf16_stochastic(v[k], uint32_t((random >> 32) & 0xffffu));
      }
    } else {
      round_bf16<kHardwareRounding>(p, bits.p);
      round_bf16<kHardwareRounding>(m, bits.m);
      round_bf16<kHardwareRounding>(v, bits.v);
    }
  }
}

// Leaves in o.p, o.m and o.v what load_state would give once store_state has stored the step step_in_registers
// took (in the bf16 modes the rounded bits widened again; the fp32 master copy and moments are kept as they are),
// so that a caller may take the next step without the round trip through memory and get the same bits
// (adamw_rows.cu's replay of the steps a row missed). A separate function, not a part of step_in_registers, so that
// the eager kernels, which store and are done, compile to exactly the code they did before the lazy update.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void reload_in_registers(AdamWOperands<kWidth>& o, const AdamWBits<kWidth>& bits) {
  if constexpr (kStorage != AdamWStorage::F32Master) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      o.p[k] = bf16_to_f32(bits.p[k]);
      o.m[k] = bf16_to_f32(bits.m[k]);
      o.v[k] = bf16_to_f32(bits.v[k]);
    }
  }
}

// Stores what step_in_registers left for elements [index, index + kWidth) of one tensor: the master copy and the
// moments as kept (fp32 o.p, o.m, o.v, or the bf16 bits), and the bf16 parameter.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void store_state(const AdamWTensorPointers& t, int64_t index, const AdamWOperands<kWidth>& o,
                                            const AdamWBits<kWidth>& bits) {
  if constexpr (kStorage == AdamWStorage::F32Master) {
    store_f32<kWidth>(t.master + index, o.p);
    store_f32<kWidth>(static_cast<float*>(t.exp_avg) + index, o.m);
    store_f32<kWidth>(static_cast<float*>(t.exp_avg_sq) + index, o.v);
  } else {
    store_bf16<kWidth>(static_cast<uint16_t*>(t.exp_avg) + index, bits.m);
    store_bf16<kWidth>(static_cast<uint16_t*>(t.exp_avg_sq) + index, bits.v);
  }
  store_bf16<kWidth>(t.param + index, bits.p);
}

// Updates elements [index, index + kWidth) of one tensor from their operands and stores them; adds their unscaled
// g² to `squares`.
template <AdamWStorage kStorage, bool kHardwareRounding, bool kSkipUntouched, int kWidth>
__device__ __forceinline__ void update_and_store(const AdamWTensorPointers& t, int64_t index, AdamWOperands<kWidth>& o,
                                                 float grad_scale, const AdamWScalars& s, uint64_t key,
                                                 float& squares) {
  AdamWBits<kWidth> bits;
  step_in_registers<kStorage, kHardwareRounding, kSkipUntouched, kWidth>(o, grad_scale, s.constants, key, index, bits,
                                                                          squares);
  store_state<kStorage, kWidth>(t, index, o, bits);
}

// Loads, updates and stores elements [index, index + kWidth) of one tensor from and to global memory.
template <AdamWStorage kStorage, bool kHardwareRounding, bool kSkipUntouched, int kWidth>
__device__ __forceinline__ void update_elements(const AdamWTensorPointers& t, int64_t index, float grad_scale,
                                                const AdamWScalars& s, uint64_t key, float& squares) {
  AdamWOperands<kWidth> o;
  load_operands<kStorage, kWidth>(t, index, o);
  update_and_store<kStorage, kHardwareRounding, kSkipUntouched, kWidth>(t, index, o, grad_scale, s, key, squares);
}

}  // namespace moetune::ops::cuda
