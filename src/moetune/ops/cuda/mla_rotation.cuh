// MLA's RoPE on the GPU, shared by the q/k/v assembly kernels (mla_qkv.cu, mla_qkv_in_place.cu): the rotation of
// one head's rope columns and its transpose, as ops/mla_rope.h does them on the CPU. A rotation source `rot` maps
// a pair index to its (cos, sin) times YaRN's attention factor: computed on the spot (RotationAtPosition) or read
// from a table a block filled once per token (the in-place kernels), with the same arithmetic either way.
#pragma once

#include <cstdint>

#include "moetune/ops/cuda/mla_qkv_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda::mla_rotation {

using pointwise::bf16;
using pointwise::to_float;

struct Rotation {
  float cos, sin;
};

// Pair i's rotation at this position: cos and sin of the fp32 angle, times the attention factor.
__device__ __forceinline__ Rotation rotation(int32_t position, const float* inv_freq, int pair, float scale) {
  float s, c;
  sincosf(float(position) * inv_freq[pair], &s, &c);
  return {c * scale, s * scale};
}

struct RotationAtPosition {
  int32_t position;
  const float* inv_freq;
  float scale;
  __device__ Rotation operator()(int pair) const { return rotation(position, inv_freq, pair, scale); }
};

// Pair i's input slots: (2i, 2i+1) interleaved, (i, i + half) rotate-half style. Outputs are always (i, i + half).
__device__ __forceinline__ int first_slot(int pair, int half, bool interleaved) { return interleaved ? 2 * pair : pair; }
__device__ __forceinline__ int second_slot(int pair, int half, bool interleaved) {
  return interleaved ? 2 * pair + 1 : pair + half;
}

// Output column c (< rope) of the rotation of x[0..rope).
template <typename RotationAt>
__device__ __forceinline__ float rotated(const bf16* x, int c, const MlaQkvShape& s, const RotationAt& rot) {
  const int half = s.rope / 2, pair = c % half;
  const Rotation r = rot(pair);
  const float a = to_float(x[first_slot(pair, half, s.interleaved)]);
  const float b = to_float(x[second_slot(pair, half, s.interleaved)]);
  return c < half ? a * r.cos - b * r.sin : b * r.cos + a * r.sin;
}

// Input slot j (< rope) of the transpose of the rotation, given dy[0..rope) as fp32 through `dy_at`.
template <typename DyAt, typename RotationAt>
__device__ __forceinline__ float unrotated(DyAt dy_at, int j, const MlaQkvShape& s, const RotationAt& rot) {
  const int half = s.rope / 2;
  const int pair = s.interleaved ? j / 2 : j % half;
  const bool first = s.interleaved ? j % 2 == 0 : j < half;
  const Rotation r = rot(pair);
  const float da = dy_at(pair), db = dy_at(pair + half);
  return first ? da * r.cos + db * r.sin : db * r.cos - da * r.sin;
}

}  // namespace moetune::ops::cuda::mla_rotation
