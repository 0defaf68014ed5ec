// The per-value rule of blockwise quantization (ops/blockwise_quant.h), written once for the CPU reference and
// the CUDA kernels so that both give the same code for the same float32 inputs.
#pragma once

#include <cstdint>

#include "moetune/core/half.h"

namespace moetune::ops {

MOETUNE_HOST_DEVICE float code_midpoint(float low, float high) { return (low + high) / 2.0f; }

// How a block's values are brought into [-1, 1]: times the float32 reciprocal of the absmax for a full block,
// divided by it for the shorter last one (bitsandbytes' CPU rule), the absmax at least 1e-38 so that an all-zero
// block codes as 0.
struct BlockScale {
  float divisor, inverse;
  bool full;
  MOETUNE_HOST_DEVICE float unit(float value) const {
    const float scaled = full ? value * inverse : value / divisor;
    return scaled < -1.0f ? -1.0f : scaled > 1.0f ? 1.0f : scaled;
  }
};

MOETUNE_HOST_DEVICE BlockScale block_scale(float absmax, bool full) {
  const float divisor = absmax > 1e-38f ? absmax : 1e-38f;
  return {divisor, 1.0f / divisor, full};
}

// The nearest code of a value in [-1, 1]: how many of the code's `count` sorted midpoints it strictly exceeds
// (ties to the lower code).
MOETUNE_HOST_DEVICE uint8_t nearest_code(const float* midpoints, int count, float unit) {
  int low = 0, high = count;
  while (low < high) {
    const int middle = (low + high) / 2;
    if (midpoints[middle] < unit) low = middle + 1;
    else high = middle;
  }
  return uint8_t(low);
}

// For a map whose code 0 is 0.0 (the unsigned dynamic map): a positive value never codes as 0. AdamW's second
// moment divides, and a small v rounded to 0 beside a first moment that was not (its signed map reaches less far
// down) would turn the next update into ~m / (sqrt(1 - beta2) |g|), tens of times the learning rate. The smallest
// code instead bounds it; the value is overestimated, so the update only shrinks.
MOETUNE_HOST_DEVICE uint8_t nonzero_for_positive(uint8_t code, float unit) {
  return code == 0 && unit > 0.0f ? uint8_t(1) : code;
}

// nearest_code with nonzero_for_positive's rule.
MOETUNE_HOST_DEVICE uint8_t nearest_nonzero_code(const float* midpoints, int count, float unit) {
  return nonzero_for_positive(nearest_code(midpoints, count, unit), unit);
}

// nearest_code by buckets, for the GPU's AdamW (a binary search is 8 dependent shared-memory loads per moment and
// element; this is one table load and a comparison or two). A value's bucket is its magnitude's exponent and top
// kCodeBucketMantissaBits mantissa bits, from 2^-kCodeBucketOctaves up to 1 (smaller magnitudes share bucket 0),
// on the side of its sign. nearest_code is monotone, so within a bucket it lies between the codes of the bucket's
// two ends: the table holds the lower one and the span, and the midpoints in the span decide, exactly as the full
// search would (CodeBuckets::build, ops/blockwise_quant.h; tested against nearest_code on every bucket's edges).
inline constexpr int kCodeBucketMantissaBits = 6;
inline constexpr int kCodeBucketOctaves = 32;
inline constexpr uint32_t kFirstCodeBucketKey = uint32_t(127 - kCodeBucketOctaves) << kCodeBucketMantissaBits;
// Bucket 0, one per (exponent, mantissa bits) key from 2^-32's up to 1.0's.
inline constexpr int kCodeBuckets = int((uint32_t(127) << kCodeBucketMantissaBits) - kFirstCodeBucketKey) + 2;

// The bucket of a value in [-1, 1] on its sign's side (-0 is +0's).
MOETUNE_HOST_DEVICE int code_bucket(float value) {
  const uint32_t key = (float_bits(value) & 0x7fffffffu) >> (23 - kCodeBucketMantissaBits);
  return key < kFirstCodeBucketKey ? 0 : int(key - kFirstCodeBucketKey) + 1;
}

// Per bucket of one sign: the smallest code its values take and how many more codes they may take.
struct CodeBucket {
  uint8_t first, span;
};

// nearest_code(midpoints, ·, unit) for unit in [-1, 1] (NaN codes as 0, as there), given the buckets of the
// positive side and of the negative side (null for a map only used with unit >= 0).
MOETUNE_HOST_DEVICE uint8_t bucketed_nearest_code(const float* midpoints, const CodeBucket* positive,
                                                  const CodeBucket* negative, float unit) {
  if (!(unit >= -1.0f && unit <= 1.0f)) return 0;
  const CodeBucket bucket = (unit < 0.0f ? negative : positive)[code_bucket(unit)];
  int code = bucket.first;
  for (int i = bucket.first; i < bucket.first + bucket.span; ++i) code += midpoints[i] < unit ? 1 : 0;
  return uint8_t(code);
}

}  // namespace moetune::ops
