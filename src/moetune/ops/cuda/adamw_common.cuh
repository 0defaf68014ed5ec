// What the fused AdamW kernels (adamw.cu, adamw_int8.cu) share: stochastic rounding of a bf16 parameter or moment
// (counter-based random bits, so that a run is reproducible and resumable), and the launch of one kernel per table
// of tensors with the storage as a compile-time constant. Included by .cu files only.
#pragma once

#include <cstdint>
#include <type_traits>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/half.h"
#include "moetune/core/shared_memory_opt_in.h"
#include "moetune/ops/cuda/adamw_kernels.h"
#include "moetune/ops/cuda/multi_tensor.cuh"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {

// splitmix64's finaliser: a bijection whose output bits all depend on all input bits.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// Counter-based randomness: the same (seed, step, tensor, element) always gives the same bits, whatever the
// launch geometry, so a run with stochastic rounding is reproducible and resumable.
__device__ __forceinline__ uint64_t tensor_key(uint64_t seed, int64_t step, int64_t position) {
  return mix64(seed ^ mix64(uint64_t(step) * kGolden ^ mix64(uint64_t(position) + kGolden)));
}
__device__ __forceinline__ uint64_t element_random(uint64_t key, int64_t index) {
  return mix64(key + uint64_t(index) * kGolden);
}

// Rounds up with probability equal to the dropped fraction of an ulp (adds 16 random bits below the kept ones,
// then truncates), so E[round(x)] = x and updates far below half an ulp still move the value on average.
// NaN keeps the nearest-even path, which keeps it a NaN.
__device__ __forceinline__ uint16_t f32_to_bf16_stochastic(float f, uint32_t random16) {
  const uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return f32_to_bf16(f);
  return uint16_t((bits + random16) >> 16);
}

// A launch's table of tensors (multi_tensor.cuh), a kernel parameter.
template <typename Pointers, int kTensors>
struct AdamWTableOf {
  static constexpr int kMaxTensors = kTensors;
  Pointers tensors[kMaxTensors];
  int64_t chunk_end[kMaxTensors];
  int64_t position[kMaxTensors];  // index in the caller's list: keys the stochastic rounding of that tensor
  int count;
  int64_t total_chunks;
};

// Each warp's Σ g² of a chunk (`squares`: this thread's) into norm_partials, when that is not null: per chunk and
// warp, so that the total's bits do not depend on the grid (the GPU's size). Warps 0 to 7 of the block.
__device__ __forceinline__ void write_norm_partials(float* norm_partials, int64_t chunk, float squares) {
  static_assert(multi_tensor::kThreads / 32 == kAdamWNormPartialsPerChunk, "one partial per warp of a chunk");
  if (norm_partials) {
    const float warp_squares = pointwise::warp_sum(squares);
    if (threadIdx.x % 32 == 0) norm_partials[chunk * kAdamWNormPartialsPerChunk + threadIdx.x / 32] = warp_squares;
  }
}

// A block's walk over a table's chunks, grid-stride: body(tensor, its elements in the chunk, its stochastic
// rounding key), then each warp's Σ g² of the chunk into norm_partials when that is not null (the sum the
// body returned for this thread: the unscaled gradients of the elements it updated).
template <AdamWStorage kStorage, typename Table, typename Body>
__device__ __forceinline__ void for_each_chunk(const Table& table, const AdamWScalars& scalars, float* norm_partials,
                                               Body body) {
  for (int64_t chunk = blockIdx.x; chunk < table.total_chunks; chunk += gridDim.x) {
    const int tensor = multi_tensor::tensor_of_chunk(table.chunk_end, table.count, chunk);
    const auto& t = table.tensors[tensor];
    const multi_tensor::Range range = multi_tensor::chunk_range(table.chunk_end, tensor, chunk, t.numel);
    const uint64_t key = kStorage == AdamWStorage::Bf16StochasticRounding
                             ? tensor_key(scalars.seed, scalars.step, table.position[tensor])
                             : 0;
    const float squares = body(t, range, key);
    write_norm_partials(norm_partials, chunk, squares);
  }
}

template <AdamWStorage kStorage>
using StorageConstant = std::integral_constant<AdamWStorage, kStorage>;

// A kernel with the block size and dynamic shared memory it is launched with: what kernel_for (below) answers when
// they are not multi_tensor::kThreads threads and none.
template <typename Kernel>
struct ShapedKernel {
  Kernel kernel;
  int threads;
  int shared_bytes;
};
template <typename Kernel>
ShapedKernel<Kernel> shaped_kernel(Kernel kernel) {
  return {kernel, multi_tensor::kThreads, 0};
}
template <typename Kernel>
ShapedKernel<Kernel> shaped_kernel(ShapedKernel<Kernel> shaped) {
  return shaped;
}
// Static and dynamic shared memory together beyond this need the kernel's opt-in
// (cudaFuncAttributeMaxDynamicSharedMemorySize, given once per kernel and device: gpu::allow_dynamic_shared_memory).
// The staged kernel's static part is its barriers (128 B): 3 stages of 16 KB with them were refused
// (cudaErrorInvalidValue, H200, session 9) when only the dynamic part was compared.
inline constexpr int kDefaultSharedBytes = 48 * 1024;
inline constexpr int kStaticSharedAllowance = 1024;

// Fills tables (Table: multi_tensor's, with position[], the index of each tensor in the caller's list) with the
// caller's tensors and launches kernel_for(StorageConstant<storage>{}) (a kernel, or a ShapedKernel) over each,
// with as many blocks as fill the GPU: kernel(table, the table's norm partials, args...). norm_partials (or null) has
// kAdamWNormPartialsPerChunk floats per chunk of every tensor; each table's start where the one before it ends.
// first_position: the position of tensors[0] in the caller's whole list (a part of it launched alone).
template <typename Table, typename Pointers, typename KernelFor, typename... Args>
cudaError_t launch_adamw_tables(AdamWStorage storage, const Pointers* tensors, int64_t count, int64_t first_position,
                                KernelFor kernel_for, float* norm_partials, cudaStream_t stream, const Args&... args) {
  int64_t chunks_before = 0;
  const auto launch = [&](const Table& table, auto kernel) -> cudaError_t {
    const auto shaped = shaped_kernel(kernel);
    if (shaped.shared_bytes > kDefaultSharedBytes - kStaticSharedAllowance)
      if (cudaError_t status = gpu::allow_dynamic_shared_memory(shaped.kernel); status != cudaSuccess) return status;
    int max_blocks = 0;
    if (cudaError_t status =
            multi_tensor::resident_blocks(shaped.kernel, max_blocks, shaped.threads, size_t(shaped.shared_bytes));
        status != cudaSuccess)
      return status;
    const int blocks = int(std::min<int64_t>(table.total_chunks, max_blocks));
    float* partials = norm_partials ? norm_partials + chunks_before * kAdamWNormPartialsPerChunk : nullptr;
    chunks_before += table.total_chunks;
    gpu::launch_dependent(shaped.kernel, blocks, shaped.threads, size_t(shaped.shared_bytes), stream, table, partials,
                          args...);
    return cudaGetLastError();
  };
  return multi_tensor::launch_in_batches<Table>(
      count, [&](int64_t index) { return tensors[index].numel; },
      [&](Table& table, int slot, int64_t index) {
        table.tensors[slot] = tensors[index];
        table.position[slot] = first_position + index;
      },
      [&](const Table& table) -> cudaError_t {
        switch (storage) {
          case AdamWStorage::F32Master:
            return launch(table, kernel_for(StorageConstant<AdamWStorage::F32Master>{}));
          case AdamWStorage::Bf16StochasticRounding:
            return launch(table, kernel_for(StorageConstant<AdamWStorage::Bf16StochasticRounding>{}));
          case AdamWStorage::Bf16NearestRounding:
            return launch(table, kernel_for(StorageConstant<AdamWStorage::Bf16NearestRounding>{}));
        }
        return cudaErrorInvalidValue;
      });
}

}  // namespace moetune::ops::cuda
