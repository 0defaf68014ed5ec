// bf16 and f16 <-> f32 conversion with round-to-nearest-even, usable on the host and in CUDA kernels.
// These are the engine's single definition of the rounding: the CUDA conversion kernels call them too,
// so that CPU and GPU agree to the bit.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MOETUNE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MOETUNE_HOST_DEVICE inline
#endif

namespace moetune {

MOETUNE_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

MOETUNE_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

MOETUNE_HOST_DEVICE float bf16_to_f32(uint16_t h) { return bits_float(uint32_t(h) << 16); }

// Round to nearest, ties to even; NaN stays a (quiet) NaN instead of rounding into infinity.
MOETUNE_HOST_DEVICE uint16_t f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return uint16_t((u + rounding_bias) >> 16);
}

MOETUNE_HOST_DEVICE float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);  // signed zero
    // Subnormal: value = mantissa * 2^-24, exact in f32.
    float magnitude = float(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Round to nearest, ties to even, including into and out of the subnormal range; overflow goes to inf.
MOETUNE_HOST_DEVICE uint16_t f32_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((abs_bits >> 13) & 0x3ffu));  // NaN
  if (abs_bits >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (abs_bits < 0x38800000u) {
    // Below the smallest normal f16 (2^-14): the result is subnormal or zero. Shift the 24-bit
    // significand right so that one unit is 2^-24, rounding to nearest even on the bits shifted out.
    if (abs_bits < 0x33000000u) return sign;  // below half the smallest subnormal: zero
    uint32_t exponent = abs_bits >> 23;
    uint32_t significand = (abs_bits & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exponent;  // 14..24
    uint32_t result = significand >> shift;
    uint32_t remainder = significand & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return uint16_t(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  uint32_t rebased = abs_bits - (112u << 23);
  uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
  return uint16_t(sign | (rounded >> 13));
}

}  // namespace moetune
