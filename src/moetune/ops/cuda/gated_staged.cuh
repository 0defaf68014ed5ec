// SwiGLU's 16-byte path staged through shared memory (session 12): a resident grid strides over tiles of
// kPacks × kPackThreads consecutive packs of 8 (thread t packs t, t + 256, ...: each p one coalesced sweep of the
// block), and each thread copies its packs of the next tile into shared memory (cp.async, 16 bytes each) before it
// computes the current tile's, so that loads stay in flight through the math without holding registers. Each
// thread reads back only the slots it filled itself, so cp.async.wait_group alone orders them: no block barrier.
// The arithmetic is gated_activation.cuh's, element for element the one-pack kernel's (activation.cu; same bits).
// Kernels that held several packs a thread in registers instead measured slower everywhere (H200, session 12,
// isolated: routed experts' forward 120-195 us against the one-pack kernel's 110, their 53-153 registers a thread
// leaving an SM fewer threads) and were taken out; docs/benchmarks.md (session 12) has their numbers. Device code
// and launch helpers for activation.cu only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/shared_memory_opt_in.h"
#include "moetune/ops/cuda/gated_activation.cuh"
#include "moetune/ops/cuda/multi_tensor.cuh"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda::gated {

using pointwise::bf16;
using Pack8 = pointwise::Pack<bf16, 8>;  // 16 bytes
constexpr int kPackElements = 8;
constexpr int kPackThreads = 256;

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

// Whether every index a launch forms fits 32 bits, where the kernels' divisions are cheaper: gate packs below
// 2·chunks, the tile start after the last stride below chunks + the grid's tiles ≤ 2·chunks + one tile.
inline bool fits_32_bits(int64_t chunks, int packs) {
  return 2 * chunks + int64_t(packs) * kPackThreads < (int64_t(1) << 32);
}

__device__ __forceinline__ void copy_async_16(Pack8* shared, const Pack8* global) {
  const unsigned destination = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(destination), "l"(global) : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Shared memory of a block: two buffers of kOperands × kPacks packs a thread.
template <int kPacks, int kOperands>
constexpr size_t staged_shared_bytes() {
  return size_t(2) * kOperands * kPacks * kPackThreads * sizeof(Pack8);
}

// The slot of (buffer, pack p, operand) of this thread: consecutive threads, consecutive 16 bytes.
template <int kPacks, int kOperands>
__device__ __forceinline__ Pack8* staged_slot(Pack8* stage, int buffer, int p, int operand) {
  return stage + ((buffer * kPacks + p) * kOperands + operand) * kPackThreads + threadIdx.x;
}

// Operands: 0 gate, 1 up (forward); 2 dout (backward).
template <int kPacks, int kOperands, typename Index>
__device__ __forceinline__ void fetch_tile(Pack8* stage, int buffer, Index tile, Index chunks, Index chunks_per_row,
                                           const Pack8* gate_up, const Pack8* dout) {
#pragma unroll
  for (int p = 0; p < kPacks; ++p) {
    const Index chunk = tile + Index(p) * kPackThreads + threadIdx.x;
    if (chunk >= chunks) continue;
    const Index g = gate_pack_of(chunk, chunks_per_row);
    copy_async_16(staged_slot<kPacks, kOperands>(stage, buffer, p, 0), gate_up + g);
    copy_async_16(staged_slot<kPacks, kOperands>(stage, buffer, p, 1), gate_up + g + chunks_per_row);
    if constexpr (kOperands == 3) copy_async_16(staged_slot<kPacks, kOperands>(stage, buffer, p, 2), dout + chunk);
  }
  commit_copies();
}

template <int kPacks, typename Index, typename Act>
__global__ void __launch_bounds__(kPackThreads) gated_forward_staged_kernel(const Pack8* __restrict__ gate_up,
                                                                           Pack8* __restrict__ out, Index chunks,
                                                                           Index chunks_per_row, bool reversed, Act act) {
  gpu::wait_for_previous_kernel();
  extern __shared__ Pack8 stage[];
  constexpr Index kTile = Index(kPacks) * kPackThreads;
  const Index tiles = (chunks + kTile - 1) / kTile;
  Index t = blockIdx.x;
  if (t >= tiles) return;
  fetch_tile<kPacks, 2>(stage, 0, tile_start(t, tiles, reversed, kTile), chunks, chunks_per_row, gate_up, nullptr);
  for (int buffer = 0; t < tiles; t += gridDim.x, buffer ^= 1) {
    const Index tile = tile_start(t, tiles, reversed, kTile);
    if (t + gridDim.x < tiles) {
      fetch_tile<kPacks, 2>(stage, buffer ^ 1, tile_start(t + gridDim.x, tiles, reversed, kTile), chunks,
                            chunks_per_row, gate_up, nullptr);
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const Index chunk = tile + Index(p) * kPackThreads + threadIdx.x;
      if (chunk >= chunks) continue;
      float g[kPackElements], u[kPackElements], o[kPackElements];
      unpack(*staged_slot<kPacks, 2>(stage, buffer, p, 0), g);
      unpack(*staged_slot<kPacks, 2>(stage, buffer, p, 1), u);
#pragma unroll
      for (int k = 0; k < kPackElements; ++k) o[k] = act.forward(g[k], u[k]);
      out[chunk] = pack(o);
    }
  }
}

// recomputed may alias dout: a tile's dout packs are in shared memory before any of its recomputed packs is
// written, and no other thread reads them.
template <int kPacks, typename Index, typename Act>
__global__ void __launch_bounds__(kPackThreads)
    gated_backward_staged_kernel(const Pack8* dout, const Pack8* __restrict__ gate_up, Pack8* __restrict__ dgate_up,
                                 Pack8* recomputed, Index chunks, Index chunks_per_row, bool reversed, Act act) {
  gpu::wait_for_previous_kernel();
  extern __shared__ Pack8 stage[];
  constexpr Index kTile = Index(kPacks) * kPackThreads;
  const Index tiles = (chunks + kTile - 1) / kTile;
  Index t = blockIdx.x;
  if (t >= tiles) return;
  fetch_tile<kPacks, 3>(stage, 0, tile_start(t, tiles, reversed, kTile), chunks, chunks_per_row, gate_up, dout);
  for (int buffer = 0; t < tiles; t += gridDim.x, buffer ^= 1) {
    const Index tile = tile_start(t, tiles, reversed, kTile);
    if (t + gridDim.x < tiles) {
      fetch_tile<kPacks, 3>(stage, buffer ^ 1, tile_start(t + gridDim.x, tiles, reversed, kTile), chunks,
                            chunks_per_row, gate_up, dout);
      wait_copies<1>();
    } else {
      wait_copies<0>();
    }
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const Index chunk = tile + Index(p) * kPackThreads + threadIdx.x;
      if (chunk >= chunks) continue;
      float g[kPackElements], u[kPackElements], d[kPackElements], dg[kPackElements], du[kPackElements];
      unpack(*staged_slot<kPacks, 3>(stage, buffer, p, 0), g);
      unpack(*staged_slot<kPacks, 3>(stage, buffer, p, 1), u);
      unpack(*staged_slot<kPacks, 3>(stage, buffer, p, 2), d);
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

// Dynamic shared memory above 48 KiB must be allowed per kernel (gpu::allow_dynamic_shared_memory: once).
template <typename Kernel>
cudaError_t allow_shared_bytes(Kernel kernel, size_t bytes) {
  return bytes <= 48 * 1024 ? cudaSuccess : gpu::allow_dynamic_shared_memory(kernel);
}

template <int kPacks, typename Index, typename Act>
cudaError_t launch_forward_staged(const void* gate_up, void* out, int64_t chunks, int64_t chunks_per_row,
                                  bool reversed, Act act, cudaStream_t stream) {
  const auto kernel = gated_forward_staged_kernel<kPacks, Index, Act>;
  constexpr size_t kShared = staged_shared_bytes<kPacks, 2>();
  if (cudaError_t status = allow_shared_bytes(kernel, kShared); status != cudaSuccess) return status;
  const int64_t tiles = (chunks + int64_t(kPacks) * kPackThreads - 1) / (int64_t(kPacks) * kPackThreads);
  int resident = 0;
  if (cudaError_t status = multi_tensor::resident_blocks(kernel, resident, kPackThreads, kShared); status != cudaSuccess)
    return status;
  const unsigned blocks = unsigned(std::min<int64_t>(tiles, resident));
  gpu::launch_dependent(kernel, blocks, kPackThreads, kShared, stream, static_cast<const Pack8*>(gate_up),
                        static_cast<Pack8*>(out), Index(chunks), Index(chunks_per_row), reversed, act);
  return cudaGetLastError();
}

template <int kPacks, typename Index, typename Act>
cudaError_t launch_backward_staged(const void* dout, const void* gate_up, void* dgate_up, void* recomputed,
                                   int64_t chunks, int64_t chunks_per_row, bool reversed, Act act,
                                   cudaStream_t stream) {
  const auto kernel = gated_backward_staged_kernel<kPacks, Index, Act>;
  constexpr size_t kShared = staged_shared_bytes<kPacks, 3>();
  if (cudaError_t status = allow_shared_bytes(kernel, kShared); status != cudaSuccess) return status;
  const int64_t tiles = (chunks + int64_t(kPacks) * kPackThreads - 1) / (int64_t(kPacks) * kPackThreads);
  int resident = 0;
  if (cudaError_t status = multi_tensor::resident_blocks(kernel, resident, kPackThreads, kShared); status != cudaSuccess)
    return status;
  const unsigned blocks = unsigned(std::min<int64_t>(tiles, resident));
  gpu::launch_dependent(kernel, blocks, kPackThreads, kShared, stream, static_cast<const Pack8*>(dout),
                        static_cast<const Pack8*>(gate_up), static_cast<Pack8*>(dgate_up),
                        static_cast<Pack8*>(recomputed), Index(chunks), Index(chunks_per_row), reversed, act);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda::gated
