// Multi-tensor launches (the idea of apex's multi_tensor_apply): one kernel walks many tensors of any size.
// Every tensor is cut into chunks of kChunkElements; a launch's table (a kernel parameter, so nothing is copied
// to the device and the host never waits) lists the tensors with the running total of their chunks, and each
// block takes chunks grid-stride and finds its tensor by binary search over those totals. A table holds a few
// hundred tensors, so thousands of tensors take a few launches. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace moetune::ops::cuda::multi_tensor {

inline constexpr int kThreads = 256;
inline constexpr int kVectorElements = 8;  // 8 bf16 = one 16-byte load
inline constexpr int64_t kChunkElements = int64_t(kThreads) * kVectorElements * 4;
// CUDA 12.1+ on Volta and later accepts this many bytes of kernel parameters (4 KB before).
inline constexpr size_t kMaxKernelParameterBytes = 32764;

inline int64_t chunk_count(int64_t numel) { return (numel + kChunkElements - 1) / kChunkElements; }

// The elements [begin, end) of one chunk within its tensor.
struct Range {
  int64_t begin, end;
};

// The tensor that holds `chunk`: the first whose running chunk total exceeds it. All threads of a block ask the
// same question, so the table reads are uniform.
template <int kMaxTensors>
__device__ __forceinline__ int tensor_of_chunk(const int64_t (&chunk_end)[kMaxTensors], int count, int64_t chunk) {
  int low = 0, high = count - 1;
  while (low < high) {
    const int middle = (low + high) / 2;
    if (chunk_end[middle] > chunk) high = middle;
    else low = middle + 1;
  }
  return low;
}

template <int kMaxTensors>
__device__ __forceinline__ Range chunk_range(const int64_t (&chunk_end)[kMaxTensors], int tensor, int64_t chunk,
                                             int64_t numel) {
  const int64_t first_chunk = tensor == 0 ? 0 : chunk_end[tensor - 1];
  const int64_t begin = (chunk - first_chunk) * kChunkElements;
  return {begin, begin + kChunkElements < numel ? begin + kChunkElements : numel};
}

// Chunks start at multiples of kChunkElements, so a tensor whose pointers are all 16-byte aligned can use
// 16-byte loads throughout (null pointers count as aligned). Views at odd offsets take the scalar path.
template <typename... Pointers>
__device__ __forceinline__ bool all_aligned_16(const Pointers*... pointers) {
  return ((reinterpret_cast<uintptr_t>(pointers) | ... | uintptr_t(0)) & 15u) == 0;
}

// Blocks of `kernel` (of `threads` threads and `shared_bytes` of dynamic shared memory) that fill the current GPU
// once (more would only queue behind them).
template <typename Kernel>
cudaError_t resident_blocks(Kernel kernel, int& blocks, int threads = kThreads, size_t shared_bytes = 0) {
  int device = 0, multiprocessors = 0, per_multiprocessor = 0;
  if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  if (cudaError_t status = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
      status != cudaSuccess)
    return status;
  if (cudaError_t status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, threads, shared_bytes);
      status != cudaSuccess)
    return status;
  blocks = std::max(1, multiprocessors * per_multiprocessor);
  return cudaSuccess;
}

// Fills tables of at most Table::kMaxTensors non-empty tensors and hands each full (and the last) one to
// `launch`. Table needs: kMaxTensors, int64_t chunk_end[kMaxTensors], int count, int64_t total_chunks.
// `fill(table, slot, index)` copies tensor `index` of the caller's list into `slot`.
template <typename Table, typename NumelOf, typename Fill, typename Launch>
cudaError_t launch_in_batches(int64_t count, NumelOf numel_of, Fill fill, Launch launch) {
  Table table{};
  int used = 0;
  int64_t chunks = 0;
  auto flush = [&]() -> cudaError_t {
    if (used == 0) return cudaSuccess;
    table.count = used;
    table.total_chunks = chunks;
    const cudaError_t status = launch(static_cast<const Table&>(table));
    used = 0;
    chunks = 0;
    return status;
  };
  for (int64_t index = 0; index < count; ++index) {
    const int64_t numel = numel_of(index);
    if (numel <= 0) continue;
    fill(table, used, index);
    chunks += chunk_count(numel);
    table.chunk_end[used] = chunks;
    if (++used == Table::kMaxTensors)
      if (cudaError_t status = flush(); status != cudaSuccess) return status;
  }
  return flush();
}

}  // namespace moetune::ops::cuda::multi_tensor
