// Lazy row-wise AdamW (ops/cuda/adamw_rows.h): a table's rows are stepped only when their gradient may be
// nonzero, and brought up to date by replaying the steps they missed when they are read. Every step, replayed or
// not, is adamw_elements.cuh's step_in_registers, the eager kernels' own code, on the same constants, gradient
// scale and stochastic rounding key, so the bits are the eager update's. Compiled without FMA contraction, like
// adamw.cu (src/moetune/CMakeLists.txt).
#include "moetune/ops/cuda/adamw_rows_kernels.h"

#include <algorithm>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/adamw_common.cuh"
#include "moetune/ops/cuda/adamw_elements.cuh"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {
namespace {

constexpr int kThreads = multi_tensor::kThreads;
constexpr int kVector = multi_tensor::kVectorElements;

template <AdamWStorage kStorage>
__device__ __forceinline__ uint64_t rounding_key(const AdamWRows& r, int64_t step) {
  return kStorage == AdamWStorage::Bf16StochasticRounding ? tensor_key(r.seed, step, r.position) : 0;
}

// Steps first..last of history replayed on kWidth elements (from `index`) whose state o holds in registers, each
// with the gradient the eager kernel sees in a row nobody read: +0 (scaled by that step's scale inside
// step_in_registers, as the eager kernel scales it). Leaves o.g at +0. Needs first <= last for `bits` to be set.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void replay(const AdamWRows& r, int64_t index, int32_t first, int32_t last,
                                       AdamWOperands<kWidth>& o, AdamWBits<kWidth>& bits) {
  float unused_squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kWidth; ++k) o.g[k] = bf16_to_f32(uint16_t(0));
  for (int32_t s = first; s <= last; ++s) {
    const AdamWStepRecord record = r.history[s];
    step_in_registers<kStorage, true, true, kWidth>(o, record.grad_scale, record.constants,
                                                   rounding_key<kStorage>(r, s), index, bits, unused_squares);
    reload_in_registers<kStorage, kWidth>(o, bits);
  }
}

// The block brings one row from step first - 1 to step last (first <= last).
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void bring_row(const AdamWRows& r, int64_t row, int32_t first, int32_t last) {
  for (int64_t column = int64_t(threadIdx.x) * kWidth; column < r.row_length; column += int64_t(blockDim.x) * kWidth) {
    const int64_t index = row * r.row_length + column;
    AdamWOperands<kWidth> o;
    AdamWBits<kWidth> bits;
    load_state<kStorage, kWidth>(r.table, index, o);
    replay<kStorage, kWidth>(r, index, first, last, o, bits);
    store_state<kStorage, kWidth>(r.table, index, o, bits);
  }
}

// One block per token (grid-stride): the first block to mark a row owns it, lists it and brings it to `step`.
template <AdamWStorage kStorage, int kWidth>
__global__ void __launch_bounds__(kThreads)
    catch_up_kernel(const AdamWRows r, const int32_t* __restrict__ ids, int64_t tokens, int32_t step) {
  gpu::wait_for_previous_kernel();
  __shared__ int64_t owned_row;
  __shared__ int32_t first_step;
  for (int64_t token = blockIdx.x; token < tokens; token += gridDim.x) {
    if (threadIdx.x == 0) {
      const int64_t id = ids[token];
      owned_row = -1;
      if (id >= 0 && id < r.rows && atomicExch(&r.marked[id], 1) == 0) {
        r.marked_list[atomicAdd(r.marked_count, 1)] = int32_t(id);
        owned_row = id;
        first_step = r.last_step[id] + 1;
        r.last_step[id] = step;
      }
    }
    __syncthreads();
    const int64_t row = owned_row;
    const int32_t first = first_step;
    __syncthreads();  // read before the next token's thread 0 writes them
    if (row >= 0 && first <= step) bring_row<kStorage, kWidth>(r, row, first, step);
  }
}

// Elements [index, index + kWidth) of a marked row: the steps it missed, then this step with its gradient,
// exactly as the eager kernel's update_elements; the gradient is zeroed. Adds the unscaled g² to `squares`.
template <AdamWStorage kStorage, int kWidth>
__device__ __forceinline__ void step_elements(const AdamWRows& r, int64_t index, int64_t row, float grad_scale,
                                              const AdamWScalars& s, uint64_t key, float& squares) {
  AdamWOperands<kWidth> o;
  AdamWBits<kWidth> bits;
  load_state<kStorage, kWidth>(r.table, index, o);
  const int32_t first = r.last_step[row] + 1;
  if (first < s.step) replay<kStorage, kWidth>(r, index, first, int32_t(s.step - 1), o, bits);
  load_bf16<kWidth>(r.table.grad + index, o.g);
  update_and_store<kStorage, true, true, kWidth>(r.table, index, o, grad_scale, s, key, squares);
  const uint16_t zeros[kWidth] = {};
  store_bf16<kWidth>(r.grad + index, zeros);
}

// The eager kernel's walk over the table's chunks (same chunks, same elements per thread, same order), doing
// the marked rows' elements only: an unmarked row's gradient is +0, which adds nothing to a thread's Σ g², so the
// norm's partials are the eager kernel's bits. A chunk without a marked row is skipped whole.
template <AdamWStorage kStorage>
__global__ void __launch_bounds__(kThreads)
    step_kernel(const AdamWRows r, float* __restrict__ norm_partials, const AdamWScalars scalars,
                const float* __restrict__ grad_scale) {
  gpu::wait_for_previous_kernel();
  const float scale = grad_scale ? *grad_scale : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) r.history[scalars.step] = {scalars.constants, scale};
  const int64_t numel = r.rows * r.row_length;
  const int64_t chunks = (numel + multi_tensor::kChunkElements - 1) / multi_tensor::kChunkElements;
  const uint64_t key = rounding_key<kStorage>(r, scalars.step);
  const bool aligned =
      multi_tensor::all_aligned_16(r.table.param, r.table.grad, r.table.exp_avg, r.table.exp_avg_sq, r.table.master);
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const int64_t begin = chunk * multi_tensor::kChunkElements;
    const int64_t end = begin + multi_tensor::kChunkElements < numel ? begin + multi_tensor::kChunkElements : numel;
    const int64_t first_row = begin / r.row_length, last_row = (end - 1) / r.row_length;
    bool any_marked = false;
    for (int64_t row = first_row + threadIdx.x; row <= last_row; row += blockDim.x) any_marked |= r.marked[row] != 0;
    float squares = 0.0f;
    if (__syncthreads_or(any_marked)) {
      int64_t scalar_begin = begin;
      if (aligned) {
        const int64_t vector_end = begin + (end - begin) / kVector * kVector;
        for (int64_t i = begin + int64_t(threadIdx.x) * kVector; i < vector_end; i += int64_t(blockDim.x) * kVector) {
          const int64_t row = i / r.row_length;  // row_length % kVector == 0: the vector lies in one row
          if (r.marked[row]) step_elements<kStorage, kVector>(r, i, row, scale, scalars, key, squares);
        }
        scalar_begin = vector_end;
      }
      for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) {
        const int64_t row = i / r.row_length;
        if (r.marked[row]) step_elements<kStorage, 1>(r, i, row, scale, scalars, key, squares);
      }
    }
    write_norm_partials(norm_partials, chunk, squares);
  }
}

// After the step: the marked rows are at `step` and unmarked (the count is cleared after this kernel).
__global__ void finish_kernel(const AdamWRows r, int32_t step) {
  gpu::wait_for_previous_kernel();
  const int32_t count = *r.marked_count;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t row = r.marked_list[i];
    r.last_step[row] = step;
    r.marked[row] = 0;
  }
}

// One block per row (grid-stride): every row to `step`.
template <AdamWStorage kStorage, int kWidth>
__global__ void __launch_bounds__(kThreads) flush_kernel(const AdamWRows r, int32_t step) {
  gpu::wait_for_previous_kernel();
  for (int64_t row = blockIdx.x; row < r.rows; row += gridDim.x) {
    const int32_t first = r.last_step[row] + 1;
    __syncthreads();  // every thread has read it before thread 0 overwrites it
    if (first <= step) {
      bring_row<kStorage, kWidth>(r, row, first, step);
      if (threadIdx.x == 0) r.last_step[row] = step;
    }
  }
}

// The eager kernel's choice of 16-byte accesses (adamw.cu: every pointer aligned), which the row kernels make
// too, so that they round exactly where it does (the paired conversion instruction).
bool aligned_16(const AdamWRows& r) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(r.table.param) | reinterpret_cast<uintptr_t>(r.table.grad) |
                         reinterpret_cast<uintptr_t>(r.table.exp_avg) |
                         reinterpret_cast<uintptr_t>(r.table.exp_avg_sq) | reinterpret_cast<uintptr_t>(r.table.master);
  return (bits & 15u) == 0;
}

// launch(StorageConstant, width constant) for the storage and the width the pointers allow.
template <typename Launch>
cudaError_t with_storage_and_width(AdamWStorage storage, const AdamWRows& r, Launch launch) {
  const auto with_width = [&](auto storage_constant) -> cudaError_t {
    if (aligned_16(r)) return launch(storage_constant, std::integral_constant<int, kVector>{});
    return launch(storage_constant, std::integral_constant<int, 1>{});
  };
  switch (storage) {
    case AdamWStorage::F32Master: return with_width(StorageConstant<AdamWStorage::F32Master>{});
    case AdamWStorage::Bf16StochasticRounding: return with_width(StorageConstant<AdamWStorage::Bf16StochasticRounding>{});
    case AdamWStorage::Bf16NearestRounding: return with_width(StorageConstant<AdamWStorage::Bf16NearestRounding>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_adamw_rows_catch_up(AdamWStorage storage, const AdamWRows& rows, const int32_t* ids,
                                       int64_t tokens, int32_t step, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  return with_storage_and_width(storage, rows, [&](auto storage_constant, auto width) -> cudaError_t {
    const auto kernel = catch_up_kernel<decltype(storage_constant)::value, decltype(width)::value>;
    gpu::launch_dependent(kernel, int(std::min<int64_t>(tokens, 65535)), kThreads, 0, stream, rows, ids, tokens, step);
    return cudaGetLastError();
  });
}

cudaError_t launch_adamw_rows_step(AdamWStorage storage, const AdamWRows& rows, const AdamWScalars& scalars,
                                   const float* grad_scale, float* norm_partials, cudaStream_t stream) {
  const cudaError_t status = with_storage_and_width(storage, rows, [&](auto storage_constant, auto) -> cudaError_t {
    const auto kernel = step_kernel<decltype(storage_constant)::value>;
    int blocks = 0;
    if (cudaError_t status = multi_tensor::resident_blocks(kernel, blocks); status != cudaSuccess) return status;
    gpu::launch_dependent(kernel, blocks, kThreads, 0, stream, rows, norm_partials, scalars, grad_scale);
    return cudaGetLastError();
  });
  if (status != cudaSuccess) return status;
  gpu::launch_dependent(finish_kernel, int(std::clamp<int64_t>((rows.rows + kThreads - 1) / kThreads, 1, 1024)),
                        kThreads, 0, stream, rows, int32_t(scalars.step));
  if (cudaError_t launched = cudaGetLastError(); launched != cudaSuccess) return launched;
  return cudaMemsetAsync(rows.marked_count, 0, sizeof(int32_t), stream);
}

cudaError_t launch_adamw_rows_flush(AdamWStorage storage, const AdamWRows& rows, int32_t step, cudaStream_t stream) {
  return with_storage_and_width(storage, rows, [&](auto storage_constant, auto width) -> cudaError_t {
    const auto kernel = flush_kernel<decltype(storage_constant)::value, decltype(width)::value>;
    int blocks = 0;
    if (cudaError_t status = multi_tensor::resident_blocks(kernel, blocks); status != cudaSuccess) return status;
    gpu::launch_dependent(kernel, int(std::min<int64_t>(blocks, rows.rows)), kThreads, 0, stream, rows, step);
    return cudaGetLastError();
  });
}

}  // namespace moetune::ops::cuda
