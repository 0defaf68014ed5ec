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

// As nearest_code, for a map whose code 0 is 0.0 (the unsigned dynamic map), except that a positive value never
// codes as 0: AdamW's second moment divides, and a small v rounded to 0 beside a first moment that was not (its
// signed map reaches less far down) would turn the next update into ~m / (sqrt(1 - beta2) |g|), tens of times
// the learning rate. The smallest code instead bounds it; the value is overestimated, so the update only shrinks.
MOETUNE_HOST_DEVICE uint8_t nearest_nonzero_code(const float* midpoints, int count, float unit) {
  const uint8_t code = nearest_code(midpoints, count, unit);
  return code == 0 && unit > 0.0f ? uint8_t(1) : code;
}

}  // namespace moetune::ops
