// SwiGLU's 16-byte path with several 16-byte packs in flight per thread (session 12). The one-pack kernel
// (activation.cu) gives each thread one pack of 8 outputs: two 16-byte loads (forward; three backward) in flight,
// then the math, then the thread retires; Moonlight's routed experts ran it at ~3.2 TB/s forward against ~3.9 for
// a copy. Here a block owns a tile of kPacks × kPackThreads consecutive packs, thread t packs t, t + 256, ...
// (each p one coalesced sweep of the block), and issues every load of its kPacks packs before the math of the
// first: kPacks times the bytes in flight a thread, and one block per tile or a resident grid striding over the
// tiles. The arithmetic is gated_activation.cuh's, element for element the one-pack kernel's (same bits).
// Measured (H200, session 12, isolated): slower than the one-pack kernel forward at every pack count (routed
// experts 120-195 us against 110: their 53-104 registers a thread leave an SM fewer threads, and a thread's packs'
// math runs serially after its loads) and backward at 2 and 4 packs; backward at 1 pack, resident, 214.6 against
// 217.3 us. The staged kernels (gated_staged.cuh) are the default; these stay as the timing test's candidates. Device code and launch helpers for activation.cu only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "moetune/ops/cuda/gated_activation.cuh"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda::gated {

using pointwise::bf16;
using Pack8 = pointwise::Pack<bf16, 8>;  // 16 bytes
constexpr int kPackElements = 8;
constexpr int kPackThreads = 256;

// Blocks an SM must hold at once (__launch_bounds__), which caps the registers a thread. Left alone, the compiler
// interleaves the packs' math and takes 94 (forward, 4 packs) to 153 (backward, 4 packs) registers, so that an SM
// holds fewer threads; tighter caps than these spill (ptxas -v, sm_90a: forward 53/64/94 registers for 1/2/4
// packs, backward 77/103/153).
template <int kPacks>
constexpr int forward_min_blocks() {
  return kPacks <= 2 ? 4 : 2;
}
template <int kPacks>
constexpr int backward_min_blocks() {
  return kPacks == 1 ? 3 : (kPacks == 2 ? 2 : 1);
}

__device__ __forceinline__ void unpack(const Pack8& pack, float (&out)[kPackElements]) {
#pragma unroll
  for (int k = 0; k < kPackElements; ++k) out[k] = pointwise::to_float(pack.v[k]);
}

__device__ __forceinline__ Pack8 pack(const float (&in)[kPackElements]) {
  Pack8 packed;
#pragma unroll
  for (int k = 0; k < kPackElements; ++k) packed.v[k] = pointwise::from_float<bf16>(in[k]);
  return packed;
}

// Pack `chunk` of the output [rows, chunks_per_row] is row r = chunk / chunks_per_row, column c; its gate pack
// in gate_up [rows, 2·chunks_per_row] is r·2·chunks_per_row + c = chunk + r·chunks_per_row, its up pack that +
// chunks_per_row. Index: uint32_t where every index fits (the launcher checks), else int64_t.
template <typename Index>
__device__ __forceinline__ Index gate_pack_of(Index chunk, Index chunks_per_row) {
  return chunk + chunk / chunks_per_row * chunks_per_row;
}

// The first pack of the t-th tile a kernel visits (of `tiles`): in order, or (reversed) from the last tile back.
// Reversed, a kernel starts where its input's producer (a GEMM writing its output in tile order) finished, whose
// last tens of MB may still be in L2 (50 MB on the H200): same packs, same math, a different visiting order.
template <typename Index>
__device__ __forceinline__ Index tile_start(Index t, Index tiles, bool reversed, Index tile_packs) {
  return (reversed ? tiles - 1 - t : t) * tile_packs;
}

template <int kPacks, typename Index, typename Act>
__global__ void __launch_bounds__(kPackThreads, forward_min_blocks<kPacks>()) gated_forward_packs_kernel(const Pack8* __restrict__ gate_up,
                                                                          Pack8* __restrict__ out, Index chunks,
                                                                          Index chunks_per_row, bool reversed, Act act) {
  constexpr Index kTile = Index(kPacks) * kPackThreads;
  const Index tiles = (chunks + kTile - 1) / kTile;
  for (Index t = blockIdx.x; t < tiles; t += gridDim.x) {
    const Index tile = tile_start(t, tiles, reversed, kTile);
    Pack8 gate[kPacks], up[kPacks];
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const Index chunk = tile + Index(p) * kPackThreads + threadIdx.x;
      if (chunk >= chunks) continue;
      const Index g = gate_pack_of(chunk, chunks_per_row);
      gate[p] = gate_up[g];
      up[p] = gate_up[g + chunks_per_row];
    }
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const Index chunk = tile + Index(p) * kPackThreads + threadIdx.x;
      if (chunk >= chunks) continue;
      float g[kPackElements], u[kPackElements], o[kPackElements];
      unpack(gate[p], g);
      unpack(up[p], u);
#pragma unroll
      for (int k = 0; k < kPackElements; ++k) o[k] = act.forward(g[k], u[k]);
      out[chunk] = pack(o);
    }
  }
}

// recomputed (may be null, may be dout itself): the forward's output too. A thread loads its dout packs before
// it writes the same packs of recomputed, and no other thread touches them, so the two may alias (neither is
// __restrict__, and dout is read through the coherent path).
template <int kPacks, typename Index, typename Act>
__global__ void __launch_bounds__(kPackThreads, backward_min_blocks<kPacks>())
    gated_backward_packs_kernel(const Pack8* dout, const Pack8* __restrict__ gate_up, Pack8* __restrict__ dgate_up,
                                Pack8* recomputed, Index chunks, Index chunks_per_row, bool reversed, Act act) {
  constexpr Index kTile = Index(kPacks) * kPackThreads;
  const Index tiles = (chunks + kTile - 1) / kTile;
  for (Index t = blockIdx.x; t < tiles; t += gridDim.x) {
    const Index tile = tile_start(t, tiles, reversed, kTile);
    Pack8 gate[kPacks], up[kPacks], grad[kPacks];
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const Index chunk = tile + Index(p) * kPackThreads + threadIdx.x;
      if (chunk >= chunks) continue;
      const Index g = gate_pack_of(chunk, chunks_per_row);
      gate[p] = gate_up[g];
      up[p] = gate_up[g + chunks_per_row];
      grad[p] = dout[chunk];
    }
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const Index chunk = tile + Index(p) * kPackThreads + threadIdx.x;
      if (chunk >= chunks) continue;
      float g[kPackElements], u[kPackElements], d[kPackElements], dg[kPackElements], du[kPackElements];
      unpack(gate[p], g);
      unpack(up[p], u);
      unpack(grad[p], d);
#pragma unroll
      for (int k = 0; k < kPackElements; ++k) act.backward(g[k], u[k], d[k], dg[k], du[k]);
      const Index at = gate_pack_of(chunk, chunks_per_row);
      dgate_up[at] = pack(dg);
      dgate_up[at + chunks_per_row] = pack(du);
      if (recomputed) {
#pragma unroll
        for (int k = 0; k < kPackElements; ++k) d[k] = act.forward(g[k], u[k]);
        recomputed[chunk] = pack(d);
      }
    }
  }
}

// Blocks for `tiles` tiles: one a tile, or (resident) at most as many as fit the GPU at once, which then stride.
template <typename Kernel>
cudaError_t pack_blocks(Kernel kernel, int64_t tiles, bool resident, unsigned& blocks, size_t shared_bytes = 0) {
  constexpr int64_t kMaxBlocks = int64_t(1) << 30;
  int64_t limit = kMaxBlocks;
  if (resident) {
    int device = 0, multiprocessors = 0, per_multiprocessor = 0;
    if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
    if (cudaError_t status = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
        status != cudaSuccess)
      return status;
    if (cudaError_t status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, kPackThreads,
                                                                                shared_bytes);
        status != cudaSuccess)
      return status;
    limit = std::max(1, multiprocessors * per_multiprocessor);
  }
  blocks = unsigned(std::min(tiles, limit));
  return cudaSuccess;
}

// Whether every index a launch forms fits 32 bits, where the kernels' divisions are cheaper: gate packs below
// 2·chunks, the tile start after the last stride below chunks + the grid's tiles ≤ 2·chunks + one tile.
inline bool fits_32_bits(int64_t chunks, int packs) {
  return 2 * chunks + int64_t(packs) * kPackThreads < (int64_t(1) << 32);
}

template <int kPacks, typename Index, typename Act>
cudaError_t launch_forward_packs(const void* gate_up, void* out, int64_t chunks, int64_t chunks_per_row,
                                 bool resident, bool reversed, Act act, cudaStream_t stream) {
  const auto kernel = gated_forward_packs_kernel<kPacks, Index, Act>;
  unsigned blocks = 0;
  const int64_t tiles = (chunks + int64_t(kPacks) * kPackThreads - 1) / (int64_t(kPacks) * kPackThreads);
  if (cudaError_t status = pack_blocks(kernel, tiles, resident, blocks); status != cudaSuccess) return status;
  kernel<<<blocks, kPackThreads, 0, stream>>>(static_cast<const Pack8*>(gate_up), static_cast<Pack8*>(out),
                                             Index(chunks), Index(chunks_per_row), reversed, act);
  return cudaGetLastError();
}

template <int kPacks, typename Index, typename Act>
cudaError_t launch_backward_packs(const void* dout, const void* gate_up, void* dgate_up, void* recomputed,
                                  int64_t chunks, int64_t chunks_per_row, bool resident, bool reversed, Act act,
                                  cudaStream_t stream) {
  const auto kernel = gated_backward_packs_kernel<kPacks, Index, Act>;
  unsigned blocks = 0;
  const int64_t tiles = (chunks + int64_t(kPacks) * kPackThreads - 1) / (int64_t(kPacks) * kPackThreads);
  if (cudaError_t status = pack_blocks(kernel, tiles, resident, blocks); status != cudaSuccess) return status;
  kernel<<<blocks, kPackThreads, 0, stream>>>(static_cast<const Pack8*>(dout), static_cast<const Pack8*>(gate_up),
                                             static_cast<Pack8*>(dgate_up), static_cast<Pack8*>(recomputed),
                                             Index(chunks), Index(chunks_per_row), reversed, act);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda::gated
