// The 16-byte moves the in-place MLA q/k/v kernels make of a token's columns (mla_qkv_in_place.cu one block per
// token, mla_qkv_warp.cu one warp per token): each taker of the token's moves (a block's threads, a warp's lanes)
// issues kInFlight loads before it stores them, so its loads overlap instead of each waiting for the one before
// (the block kernel's forward: 0.076 -> 0.063 ms a layer on Moonlight's shapes, H200, session 10).
#pragma once

#include <cstdint>

#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda::mla_moves {

using pointwise::bf16;

constexpr int kInFlight = 4;

__device__ __forceinline__ uint4 load16(const bf16* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void store16(bf16* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }
__device__ __forceinline__ uint4 zeros16() { return make_uint4(0, 0, 0, 0); }

// One 16-byte move of a token's work: src to dst, zeros where src is null, nothing where dst is null.
struct Move {
  const bf16* src;
  bf16* dst;
};

// Moves [0, count), move_at(i) giving each, taken by `takers` threads of which this one is `taker`. (Unsigned
// like threadIdx / blockDim: with int strides the block kernel's forward took 74 registers instead of 48.)
template <typename MoveAt>
__device__ __forceinline__ void run_moves(unsigned taker, unsigned takers, int count, const MoveAt& move_at) {
  for (int base = taker; base < count; base += kInFlight * takers) {
    Move moves[kInFlight];
    uint4 values[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = base + u * int(takers);
      moves[u] = i < count ? move_at(i) : Move{nullptr, nullptr};
      values[u] = moves[u].src != nullptr ? load16(moves[u].src) : zeros16();
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (moves[u].dst != nullptr) store16(moves[u].dst, values[u]);
  }
}

}  // namespace moetune::ops::cuda::mla_moves
