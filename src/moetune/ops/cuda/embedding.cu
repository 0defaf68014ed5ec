// Embedding lookup and its gradient. The forward copies rows kVec elements at a time (16-byte accesses when the
// hidden width and the pointers allow it). The backward is deterministic without atomics: the positions are
// radix-sorted by id (CUB, stable, so equal ids keep position order), then one block per (run of equal ids,
// column tile) sums the run's rows of dout in fp32 and adds the sum once into the table's row.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <initializer_list>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/embedding_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;
// The backward's column tile: few enough columns that a long run (a repeated padding id) is spread over several
// blocks of a wide row.
constexpr int kRunThreads = 64;

template <int kVec>
__global__ void embedding_forward_kernel(const int32_t* __restrict__ ids, const bf16* __restrict__ table,
                                         bf16* __restrict__ out, int64_t tokens, int64_t vocab, int64_t hidden,
                                         float scale) {
  gpu::wait_for_previous_kernel();
  const int64_t chunks_per_row = hidden / kVec, chunks = tokens * chunks_per_row;
  for (int64_t chunk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; chunk < chunks;
       chunk += int64_t(gridDim.x) * blockDim.x) {
    const int64_t token = chunk / chunks_per_row, column = (chunk - token * chunks_per_row) * kVec;
    const int64_t id = ids[token];
    float v[kVec] = {};
    if (id >= 0 && id < vocab) load<kVec>(table + id * hidden + column, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] *= scale;  // exact at 1
    store<kVec>(out + token * hidden + column, v);
  }
}

// Sort keys: the id, or `vocab` for an id outside the table or the padding row (sorted last, then skipped);
// values: the position.
__global__ void sort_input_kernel(const int32_t* __restrict__ ids, uint32_t* __restrict__ keys,
                                  int32_t* __restrict__ positions, int64_t tokens, int64_t vocab, int64_t padding_row) {
  gpu::wait_for_previous_kernel();
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = ids[t];
    keys[t] = uint32_t(id >= 0 && id < vocab && id != padding_row ? id : vocab);
    positions[t] = int32_t(t);
  }
}

// Grid: (sorted position, column tile). Only the block at the first position of a run works; it walks the run.
template <int kVec, typename Out>
__global__ void add_runs_kernel(const bf16* __restrict__ dout, const uint32_t* __restrict__ sorted_ids,
                                const int32_t* __restrict__ sorted_positions, Out* __restrict__ dtable, int64_t tokens,
                                int64_t vocab, int64_t hidden, float scale) {
  gpu::wait_for_previous_kernel();
  const int64_t start = blockIdx.x;
  const uint32_t id = sorted_ids[start];
  if ((start > 0 && sorted_ids[start - 1] == id) || int64_t(id) >= vocab) return;
  const int64_t column = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * kVec;
  if (column >= hidden) return;
  float sum[kVec] = {};
  for (int64_t p = start; p < tokens && sorted_ids[p] == id; ++p) {
    float v[kVec];
    load<kVec>(dout + int64_t(sorted_positions[p]) * hidden + column, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) sum[k] += scale * v[k];
  }
  Out* row = dtable + int64_t(id) * hidden + column;
  float current[kVec];
  load<kVec>(row, current);
#pragma unroll
  for (int k = 0; k < kVec; ++k) current[k] += sum[k];
  store<kVec>(row, current);
}

bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

unsigned blocks_for(int64_t work) { return unsigned(std::min((work + kThreads - 1) / kThreads, kMaxBlocks)); }

// Bits the radix sort must look at: enough for every key up to `vocab` (the out-of-table key) inclusive.
int key_bits(int64_t vocab) {
  int bits = 1;
  while (bits < 32 && (uint64_t(1) << bits) <= uint64_t(vocab)) ++bits;
  return bits;
}

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace, carved in order: keys in/out, positions in/out, CUB's temporary storage.
struct Workspace {
  uint32_t* keys_in;
  uint32_t* keys_out;
  int32_t* positions_in;
  int32_t* positions_out;
  void* sort_storage;
  size_t sort_bytes;
};

size_t sort_storage_bytes(int64_t tokens, int64_t vocab) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
                                  static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int(tokens), 0,
                                  key_bits(vocab));
  return bytes;
}

Workspace carve(void* base, int64_t tokens, int64_t vocab) {
  char* p = static_cast<char*>(base);
  const size_t array = round_up(size_t(tokens) * 4);
  Workspace w{};
  w.keys_in = reinterpret_cast<uint32_t*>(p);
  w.keys_out = reinterpret_cast<uint32_t*>(p + array);
  w.positions_in = reinterpret_cast<int32_t*>(p + 2 * array);
  w.positions_out = reinterpret_cast<int32_t*>(p + 3 * array);
  w.sort_storage = p + 4 * array;
  w.sort_bytes = sort_storage_bytes(tokens, vocab);
  return w;
}

template <int kVec, typename Out>
cudaError_t add_runs(const bf16* dout, const Workspace& w, Out* dtable, int64_t tokens, int64_t vocab, int64_t hidden,
                     float scale, cudaStream_t stream) {
  const int64_t columns_per_block = int64_t(kRunThreads) * kVec;
  const dim3 grid(unsigned(tokens), unsigned((hidden + columns_per_block - 1) / columns_per_block));
  gpu::launch_dependent(add_runs_kernel<kVec, Out>, grid, kRunThreads, 0, stream, dout, w.keys_out, w.positions_out,
                        dtable, tokens, vocab, hidden, scale);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_embedding_forward(const int32_t* ids, const void* table, void* out, int64_t tokens, int64_t vocab,
                                     int64_t hidden, float scale, cudaStream_t stream) {
  if (tokens == 0 || hidden == 0) return cudaSuccess;
  const auto* tp = static_cast<const bf16*>(table);
  auto* op = static_cast<bf16*>(out);
  if (hidden % 8 == 0 && aligned16({table, out}))
    gpu::launch_dependent(embedding_forward_kernel<8>, blocks_for(tokens * hidden / 8), kThreads, 0, stream, ids, tp,
                          op, tokens, vocab, hidden, scale);
  else
    gpu::launch_dependent(embedding_forward_kernel<1>, blocks_for(tokens * hidden), kThreads, 0, stream, ids, tp, op,
                          tokens, vocab, hidden, scale);
  return cudaGetLastError();
}

size_t embedding_backward_workspace_bytes(int64_t tokens, int64_t vocab) {
  if (tokens == 0) return 0;
  return 4 * round_up(size_t(tokens) * 4) + sort_storage_bytes(tokens, vocab);
}

cudaError_t launch_embedding_backward(const void* dout, const int32_t* ids, void* dtable, bool dtable_is_bf16,
                                      int64_t tokens, int64_t vocab, int64_t hidden, int64_t padding_row, float scale,
                                      void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (tokens == 0 || hidden == 0) return cudaSuccess;
  if (workspace_bytes < embedding_backward_workspace_bytes(tokens, vocab)) return cudaErrorInvalidValue;
  Workspace w = carve(workspace, tokens, vocab);
  gpu::launch_dependent(sort_input_kernel, blocks_for(tokens), kThreads, 0, stream, ids, w.keys_in, w.positions_in,
                        tokens, vocab, padding_row);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  status = cub::DeviceRadixSort::SortPairs(w.sort_storage, w.sort_bytes, w.keys_in, w.keys_out, w.positions_in,
                                           w.positions_out, int(tokens), 0, key_bits(vocab), stream);
  if (status != cudaSuccess) return status;
  const auto* d = static_cast<const bf16*>(dout);
  const bool vector = hidden % 8 == 0 && aligned16({dout, dtable});
  if (dtable_is_bf16) {
    auto* table = static_cast<bf16*>(dtable);
    return vector ? add_runs<8>(d, w, table, tokens, vocab, hidden, scale, stream)
                  : add_runs<1>(d, w, table, tokens, vocab, hidden, scale, stream);
  }
  auto* table = static_cast<float*>(dtable);
  // An F32 row is 16-byte aligned in chunks of 4; 8 consecutive floats are two such loads, still aligned.
  return vector ? add_runs<8>(d, w, table, tokens, vocab, hidden, scale, stream)
                : add_runs<1>(d, w, table, tokens, vocab, hidden, scale, stream);
}

}  // namespace moetune::ops::cuda
