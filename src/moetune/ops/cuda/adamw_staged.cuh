// The fused AdamW kernel with its loads staged through shared memory (AdamWAccess::stages ≥ 2): one producer
// thread copies tile after tile of every operand into a ring of stages with bulk asynchronous copies
// (bulk_copy.cuh), several tiles ahead, while 256 consumer threads update the tile already there and store the
// results to global memory. The bytes in flight are the ring's, not the registers': the register kernel
// (adamw.cu) holds one 16-byte vector an operand a thread, and holding more spilled or cost occupancy.
//
// Bit for bit the register kernel's results: the same chunks, each consumer thread updates the same elements in
// the same order (tile k of a chunk is the register kernel's k-th iteration: thread t's vector at 8 t), the
// scalar tail of a tensor and a tensor not 16-byte aligned go the register kernel's way from global memory, and
// the norm partials are the same warps' sums of the same chunk. Included by adamw.cu only.
#pragma once

#include <cstdint>

#include "moetune/ops/cuda/adamw_common.cuh"
#include "moetune/ops/cuda/adamw_elements.cuh"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/bulk_copy.cuh"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {

// The runtime half of the staged kernel's access (AdamWAccess), a kernel parameter.
struct AdamWStaging {
  int stages;
  bool evict_first;
};

inline constexpr int kStagedConsumers = multi_tensor::kThreads;
inline constexpr int kStagedThreads = kStagedConsumers + 32;  // and one producer warp
// One vector of 8 elements a consumer thread; a chunk is four tiles.
inline constexpr int kStagedTileElements = kStagedConsumers * multi_tensor::kVectorElements;
inline constexpr int kStagedTilesPerChunk = int(multi_tensor::kChunkElements / kStagedTileElements);
static_assert(multi_tensor::kChunkElements % kStagedTileElements == 0);

// A stage holds one tile of each operand: the gradient, then the parameter (or master copy), exp_avg, exp_avg_sq.
// The regions start at multiples of 4 KB, as the bulk copies' 16-byte alignment needs.
template <AdamWStorage kStorage>
struct StagedTile {
  using State = AdamWStateType<kStorage>;
  static constexpr int kGradBytes = kStagedTileElements * 2;
  static constexpr int kStateBytes = kStagedTileElements * int(sizeof(State));
  static constexpr int kBytes = kGradBytes + 3 * kStateBytes;
  // Bytes a tile of `elements` elements copies.
  static constexpr uint32_t bytes_of(int64_t elements) { return uint32_t(elements) * uint32_t(2 + 3 * sizeof(State)); }

  unsigned char* base;
  __device__ uint16_t* grad() const { return reinterpret_cast<uint16_t*>(base); }
  // 0: the parameter or master copy, 1: exp_avg, 2: exp_avg_sq.
  __device__ State* state(int operand) const {
    return reinterpret_cast<State*>(base + kGradBytes + operand * kStateBytes);
  }
};

// A chunk as both sides of the ring see it: its tensor, its elements, and where its 16-byte vectors end (at its
// start when a pointer of the tensor is not 16-byte aligned: all its elements go the scalar way).
struct StagedChunk {
  const AdamWTensorPointers* t;
  int tensor;
  multi_tensor::Range range;
  int64_t vector_end;

  // The first element of tile `k` and how many of its elements are vectors (0 to kStagedTileElements).
  __device__ int64_t tile_begin(int k) const { return range.begin + int64_t(k) * kStagedTileElements; }
  __device__ int tile_vector_elements(int k) const {
    const int64_t left = vector_end - tile_begin(k);
    return int(left <= 0 ? 0 : left < kStagedTileElements ? left : kStagedTileElements);
  }
};

template <typename Table>
__device__ __forceinline__ StagedChunk staged_chunk(const Table& table, int64_t chunk) {
  constexpr int kVector = multi_tensor::kVectorElements;
  const int tensor = multi_tensor::tensor_of_chunk(table.chunk_end, table.count, chunk);
  const AdamWTensorPointers& t = table.tensors[tensor];
  const multi_tensor::Range range = multi_tensor::chunk_range(table.chunk_end, tensor, chunk, t.numel);
  const bool aligned = multi_tensor::all_aligned_16(t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.master);
  return {&t, tensor, range, aligned ? range.begin + (range.end - range.begin) / kVector * kVector : range.begin};
}

// The producer: for each of the block's tiles in turn, waits until the consumers have read the stage it goes to
// (the tile `stages` before it), then copies its vectors' operands there (a tile without any only arrives).
template <AdamWStorage kStorage, typename Table>
__device__ __forceinline__ void produce_tiles(const Table& table, const AdamWStaging& staging, int tiles,
                                              unsigned char* ring, uint64_t* full, uint64_t* empty) {
  using Tile = StagedTile<kStorage>;
  using State = typename Tile::State;
  const uint64_t policy = staging.evict_first ? bulk::evict_first_policy() : 0;
  const auto copy = [&](void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
    if (staging.evict_first) bulk::copy_to_shared(destination, source, bytes, barrier, policy);
    else bulk::copy_to_shared(destination, source, bytes, barrier);
  };
  StagedChunk chunk{};
  int stage = 0;
  uint32_t round = 0;
  for (int j = 0; j < tiles; ++j) {
    const int k = j % kStagedTilesPerChunk;
    if (k == 0) chunk = staged_chunk(table, blockIdx.x + int64_t(j / kStagedTilesPerChunk) * gridDim.x);
    if (round > 0) bulk::wait(&empty[stage], (round - 1) & 1);
    const int elements = chunk.tile_vector_elements(k);
    bulk::arrive_expect_bytes(&full[stage], Tile::bytes_of(elements));
    if (elements > 0) {
      const Tile tile{ring + stage * Tile::kBytes};
      const int64_t begin = chunk.tile_begin(k);
      const AdamWTensorPointers& t = *chunk.t;
      const State* state = updated_state<kStorage>(t);
      const uint32_t state_bytes = uint32_t(elements) * sizeof(State);
      copy(tile.grad(), t.grad + begin, uint32_t(elements) * 2, &full[stage]);
      copy(tile.state(0), state + begin, state_bytes, &full[stage]);
      copy(tile.state(1), static_cast<const State*>(t.exp_avg) + begin, state_bytes, &full[stage]);
      copy(tile.state(2), static_cast<const State*>(t.exp_avg_sq) + begin, state_bytes, &full[stage]);
    }
    if (++stage == staging.stages) stage = 0, ++round;
  }
}

// Launched with kStagedThreads threads and staging.stages × StagedTile<kStorage>::kBytes of dynamic shared memory.
// kMinBlocks: as the register kernel's (0: what the registers give; 3 caps them at 72, which spills a little with
// stochastic rounding).
template <AdamWStorage kStorage, bool kHardwareRounding, bool kSkipUntouched, int kMinBlocks, typename Table>
__global__ void __launch_bounds__(kStagedThreads, kMinBlocks)
    adamw_staged_kernel(const __grid_constant__ Table table, float* __restrict__ norm_partials,
                        const AdamWScalars scalars, const float* __restrict__ grad_scale, const AdamWStaging staging) {
  gpu::wait_for_previous_kernel();
  using Tile = StagedTile<kStorage>;
  constexpr int kVector = multi_tensor::kVectorElements;
  extern __shared__ __align__(128) unsigned char ring[];
  // full[s]: stage s holds its next tile (the producer's arrival and the copies' bytes); empty[s]: every consumer
  // warp has read it.
  __shared__ uint64_t full[kAdamWMaxStages], empty[kAdamWMaxStages];
  if (threadIdx.x == 0) {
    for (int s = 0; s < staging.stages; ++s) {
      bulk::barrier_init(&full[s], 1);
      bulk::barrier_init(&empty[s], kStagedConsumers / 32);
    }
    bulk::fence_barrier_init();
  }
  __syncthreads();

  // The block's chunks, grid-stride as the register kernel takes them, each cut into kStagedTilesPerChunk tiles
  // (a table's chunks are far fewer than 2^29: its tensors' elements, 2^42 at most here, over 8192).
  const int64_t chunks =
      table.total_chunks > blockIdx.x ? (table.total_chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  const int tiles = int(chunks) * kStagedTilesPerChunk;
  if (threadIdx.x >= kStagedConsumers) {
    if (threadIdx.x == kStagedConsumers) produce_tiles<kStorage>(table, staging, tiles, ring, full, empty);
    return;
  }

  const float scale = grad_scale ? *grad_scale : 1.0f;
  const int lane = threadIdx.x % 32;
  StagedChunk chunk{};
  uint64_t key = 0;
  float squares = 0.0f;
  int stage = 0;
  uint32_t round = 0;
  for (int j = 0; j < tiles; ++j) {
    const int k = j % kStagedTilesPerChunk;
    const int64_t chunk_index = blockIdx.x + int64_t(j / kStagedTilesPerChunk) * gridDim.x;
    if (k == 0) {
      chunk = staged_chunk(table, chunk_index);
      key = kStorage == AdamWStorage::Bf16StochasticRounding
                ? tensor_key(scalars.seed, scalars.step, table.position[chunk.tensor])
                : 0;
      squares = 0.0f;
    }
    const int offset = int(threadIdx.x) * kVector;
    const bool has_vector = offset < chunk.tile_vector_elements(k);
    AdamWOperands<kVector> operands;
    bulk::wait(&full[stage], round & 1);
    if (has_vector) {
      const Tile tile{ring + stage * Tile::kBytes};
      load_operands<kStorage, kVector>(tile.grad() + offset, tile.state(0) + offset, tile.state(1) + offset,
                                       tile.state(2) + offset, operands);
    }
    // The warp's reads of the stage are done (ordered before the arrival): the producer may refill it.
    __syncwarp();
    if (lane == 0) bulk::arrive(&empty[stage]);
    if (has_vector)
      update_and_store<kStorage, kHardwareRounding, kSkipUntouched, kVector>(*chunk.t, chunk.tile_begin(k) + offset,
                                                                             operands, scale, scalars, key, squares);
    if (k == kStagedTilesPerChunk - 1) {
      for (int64_t i = chunk.vector_end + threadIdx.x; i < chunk.range.end; i += kStagedConsumers)
        update_elements<kStorage, kHardwareRounding, kSkipUntouched, 1>(*chunk.t, i, scale, scalars, key, squares);
      write_norm_partials(norm_partials, chunk_index, squares);
    }
    if (++stage == staging.stages) stage = 0, ++round;
  }
}

}  // namespace moetune::ops::cuda
