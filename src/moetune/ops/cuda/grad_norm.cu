// Global gradient norm over many bf16 tensors without a host round trip: per-block partial sums of squares
// (multi-tensor, 16-byte loads where aligned), one fixed-order final reduction, and the clip coefficient computed
// on the device so the optimizer can read it there. Reads 2 bytes per gradient element.
#include <cmath>

#include "moetune/core/half.h"
#include "moetune/ops/cuda/grad_norm_kernels.h"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {
namespace {

// A fixed block count (not one derived from the GPU's size) keeps the summation order, and so the bits of the
// result, the same on every GPU.
constexpr int kMaxPartialBlocks = 1024;

struct GradNormTable {
  static constexpr int kMaxTensors = 1024;
  const uint16_t* data[kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t chunk_end[kMaxTensors];
  int count;
  int64_t total_chunks;
  // The one tensor (or -1) read only in its marked rows (GradNormTensor::row_marked).
  int sparse_tensor;
  const int32_t* row_marked;
  int64_t row_length;
};
static_assert(sizeof(GradNormTable) + sizeof(float*) <= multi_tensor::kMaxKernelParameterBytes);

int blocks_for(const GradNormTable& table) { return int(std::min<int64_t>(table.total_chunks, kMaxPartialBlocks)); }

// Sum over the block in a fixed tree (shuffles within warps, then across warps), valid in thread 0.
__device__ __forceinline__ float block_sum(float value) {
  __shared__ float warp_sums[multi_tensor::kThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  value = lane < int(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
  if (warp == 0) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ __forceinline__ void add_squares(uint4 packed, float& sum) {
  const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float low = bf16_to_f32(uint16_t(words[k] & 0xffffu)), high = bf16_to_f32(uint16_t(words[k] >> 16));
    sum += low * low + high * high;
  }
}

// Each thread loads kInFlight 16-byte vectors (blockDim.x vectors apart) before it adds any, and adds them in the
// order one at a time would: the same sum, with more loads outstanding.
template <int kInFlight>
__global__ void __launch_bounds__(multi_tensor::kThreads)
    square_sum_partials_kernel(const __grid_constant__ GradNormTable table, float* __restrict__ partials) {
  constexpr int kVector = multi_tensor::kVectorElements;
  float sum = 0.0f;
  for (int64_t chunk = blockIdx.x; chunk < table.total_chunks; chunk += gridDim.x) {
    const int tensor = multi_tensor::tensor_of_chunk(table.chunk_end, table.count, chunk);
    const uint16_t* data = table.data[tensor];
    const multi_tensor::Range range = multi_tensor::chunk_range(table.chunk_end, tensor, chunk, table.numel[tensor]);
    // A row-sparse gradient: only marked rows are read (the others are +0, which leaves `sum` as it is), and a
    // chunk without any is skipped. The block's threads agree on both tests.
    const bool sparse = tensor == table.sparse_tensor;
    if (sparse) {
      bool any_marked = false;
      for (int64_t row = range.begin / table.row_length + threadIdx.x; row <= (range.end - 1) / table.row_length;
           row += blockDim.x)
        any_marked |= table.row_marked[row] != 0;
      if (!__syncthreads_or(any_marked)) continue;
    }
    const auto wanted = [&](int64_t i) { return !sparse || table.row_marked[i / table.row_length] != 0; };
    int64_t scalar_begin = range.begin;
    if (multi_tensor::all_aligned_16(data)) {
      const int64_t vector_end = range.begin + (range.end - range.begin) / kVector * kVector;
      const int64_t stride = int64_t(blockDim.x) * kVector;
      for (int64_t first = range.begin + int64_t(threadIdx.x) * kVector; first < vector_end;
           first += stride * kInFlight) {
        uint4 packed[kInFlight];
#pragma unroll
        for (int u = 0; u < kInFlight; ++u)
          if (first + u * stride < vector_end && wanted(first + u * stride))
            packed[u] = *reinterpret_cast<const uint4*>(data + first + u * stride);
#pragma unroll
        for (int u = 0; u < kInFlight; ++u)
          if (first + u * stride < vector_end && wanted(first + u * stride)) add_squares(packed[u], sum);
      }
      scalar_begin = vector_end;
    }
    for (int64_t i = scalar_begin + threadIdx.x; i < range.end; i += blockDim.x) {
      if (!wanted(i)) continue;
      const float g = bf16_to_f32(data[i]);
      sum += g * g;
    }
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Two loads in flight a thread: over the reference job's 3.1 B gradients on the H200 1.391 and 1.420 ms in two
// calls, against 1.422 with one and 1.520 with four (OptimizerAccessGpu.DISABLED_TimesReferenceJobSlots): at
// ~4.4 TB/s either way, within the calls' noise.
constexpr int kNormVectorsInFlight = 2;

__global__ void __launch_bounds__(multi_tensor::kThreads)
    sum_partials_kernel(const float* __restrict__ partials, int64_t count, float* __restrict__ total) {
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *total = sum;
}

// Fixed geometry (kMaxPartialBlocks blocks, grid-stride), so the same order on every GPU.
__global__ void __launch_bounds__(multi_tensor::kThreads)
    float_sum_partials_kernel(const float* __restrict__ values, int64_t count, float* __restrict__ partials) {
  float sum = 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    sum += values[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void clip_coefficient_kernel(const float* __restrict__ norm_squared, double max_norm,
                                        float* __restrict__ coefficient) {
  const double coefficient_unclamped = max_norm / (sqrt(double(*norm_squared)) + 1e-6);
  // fmin would turn a NaN into 1 and hide a broken step; torch's clamp keeps it.
  *coefficient = float(isnan(coefficient_unclamped) ? coefficient_unclamped : fmin(coefficient_unclamped, 1.0));
}

// Runs `launch(table, first_partial)` for each table of tensors, the partials of consecutive tables following
// one another; returns the total number of partials through `partial_count`.
template <typename Launch>
cudaError_t for_each_table(const GradNormTensor* tensors, int64_t count, int64_t& partial_count, Launch launch) {
  partial_count = 0;
  return multi_tensor::launch_in_batches<GradNormTable>(
      count, [&](int64_t index) { return tensors[index].numel; },
      [&](GradNormTable& table, int slot, int64_t index) {
        if (slot == 0) table.sparse_tensor = -1;
        if (tensors[index].row_marked) {  // the launcher checked: at most one
          table.sparse_tensor = slot;
          table.row_marked = tensors[index].row_marked;
          table.row_length = tensors[index].row_length;
        }
        table.data[slot] = tensors[index].data;
        table.numel[slot] = tensors[index].numel;
      },
      [&](const GradNormTable& table) -> cudaError_t {
        const cudaError_t status = launch(table, partial_count);
        partial_count += blocks_for(table);
        return status;
      });
}

}  // namespace

int64_t grad_norm_partial_count(const GradNormTensor* tensors, int64_t count) {
  int64_t partial_count = 0;
  for_each_table(tensors, count, partial_count, [](const GradNormTable&, int64_t) { return cudaSuccess; });
  return partial_count;
}

cudaError_t launch_grad_norm_squared(const GradNormTensor* tensors, int64_t count, float* partials,
                                     float* norm_squared, cudaStream_t stream) {
  int64_t partial_count = 0;
  const cudaError_t status = for_each_table(
      tensors, count, partial_count, [&](const GradNormTable& table, int64_t first_partial) -> cudaError_t {
        square_sum_partials_kernel<kNormVectorsInFlight>
            <<<blocks_for(table), multi_tensor::kThreads, 0, stream>>>(table, partials + first_partial);
        return cudaGetLastError();
      });
  if (status != cudaSuccess) return status;
  // Always launched, so that an empty list still writes 0.
  sum_partials_kernel<<<1, multi_tensor::kThreads, 0, stream>>>(partials, partial_count, norm_squared);
  return cudaGetLastError();
}

cudaError_t launch_float_sum(const float* values, int64_t count, float* scratch, float* total, cudaStream_t stream) {
  static_assert(kFloatSumScratch == kMaxPartialBlocks);
  float_sum_partials_kernel<<<kMaxPartialBlocks, multi_tensor::kThreads, 0, stream>>>(values, count, scratch);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  sum_partials_kernel<<<1, multi_tensor::kThreads, 0, stream>>>(scratch, kMaxPartialBlocks, total);
  return cudaGetLastError();
}

cudaError_t launch_clip_coefficient(const float* norm_squared, double max_norm, float* coefficient,
                                    cudaStream_t stream) {
  clip_coefficient_kernel<<<1, 1, 0, stream>>>(norm_squared, max_norm, coefficient);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
