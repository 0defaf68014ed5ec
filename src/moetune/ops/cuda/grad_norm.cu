// Global gradient norm over many bf16 tensors without a host round trip: partial sums of squares, one per fixed
// span of a tensor (multi-tensor, 16-byte loads where aligned), one fixed-order final reduction, and the clip
// coefficient computed on the device so the optimizer can read it there. Reads 2 bytes per gradient element.
#include <cmath>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/half.h"
#include "moetune/ops/cuda/grad_norm_kernels.h"
#include "moetune/ops/cuda/multi_tensor.cuh"

namespace moetune::ops::cuda {
namespace {

// launch_float_sum's fixed block count (not one derived from the GPU's size): the summation order, and so the
// bits of the result, the same on every GPU.
constexpr int kMaxPartialBlocks = 1024;

// One block per slot: block b of a launch takes the tensor whose running slot total first exceeds b.
struct GradNormTable {
  static constexpr int kMaxTensors = 1000;
  const uint16_t* data[kMaxTensors];
  int64_t numel[kMaxTensors];
  int64_t first_slot[kMaxTensors];  // in the caller's slot array
  int64_t block_end[kMaxTensors];   // running total of the tensors' slots within this launch
  int count;
  // The one tensor (or -1) read only in its marked rows (GradNormTensor::row_marked).
  int sparse_tensor;
  const int32_t* row_marked;
  int64_t row_length;
};
static_assert(sizeof(GradNormTable) + sizeof(float*) <= multi_tensor::kMaxKernelParameterBytes);

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

// Block b sums the squares of one slot's span (kGradNormSlotElements of one tensor, fewer at its end). Each thread
// loads kInFlight 16-byte vectors (blockDim.x vectors apart) before it adds any, and adds them in the order one
// at a time would: the same sum, with more loads outstanding.
template <int kInFlight>
__global__ void __launch_bounds__(multi_tensor::kThreads)
    slot_partials_kernel(const __grid_constant__ GradNormTable table, float* __restrict__ slots) {
  gpu::wait_for_previous_kernel();
  constexpr int kVector = multi_tensor::kVectorElements;
  const int tensor = multi_tensor::tensor_of_chunk(table.block_end, table.count, int64_t(blockIdx.x));
  const int64_t slot = int64_t(blockIdx.x) - (tensor == 0 ? 0 : table.block_end[tensor - 1]);
  const uint16_t* data = table.data[tensor];
  const int64_t begin = slot * kGradNormSlotElements;
  const int64_t end = begin + kGradNormSlotElements < table.numel[tensor] ? begin + kGradNormSlotElements : table.numel[tensor];
  // A row-sparse gradient: only marked rows are read (the others are +0, which leaves `sum` as it is), and a
  // slot without any is written 0 unread. The block's threads agree on both tests.
  const bool sparse = tensor == table.sparse_tensor;
  if (sparse) {
    bool any_marked = false;
    for (int64_t row = begin / table.row_length + threadIdx.x; row <= (end - 1) / table.row_length; row += blockDim.x)
      any_marked |= table.row_marked[row] != 0;
    if (!__syncthreads_or(any_marked)) {
      if (threadIdx.x == 0) slots[table.first_slot[tensor] + slot] = 0.0f;
      return;
    }
  }
  // Element i's row from its offset in the slot: one 64-bit division a block and 32-bit ones after (a slot's
  // offsets and a row's length fit 32 bits). A 64-bit division for every vector made the embedding's ~2.5 k
  // sparse slots on Moonlight cost more than its dense gradients' streaming.
  const int64_t first_row = sparse ? begin / table.row_length : 0;
  const uint32_t begin_in_row = sparse ? uint32_t(begin - first_row * table.row_length) : 0;
  const uint32_t row_length = sparse ? uint32_t(table.row_length) : 1;
  const auto wanted = [&](int64_t i) {
    return !sparse || table.row_marked[first_row + (uint32_t(i - begin) + begin_in_row) / row_length] != 0;
  };
  float sum = 0.0f;
  int64_t scalar_begin = begin;
  // A span starts at a multiple of kGradNormSlotElements: aligned where the tensor is.
  if (multi_tensor::all_aligned_16(data)) {
    const int64_t vector_end = begin + (end - begin) / kVector * kVector;
    const int64_t stride = int64_t(blockDim.x) * kVector;
    for (int64_t first = begin + int64_t(threadIdx.x) * kVector; first < vector_end; first += stride * kInFlight) {
      uint4 packed[kInFlight];
      bool taken[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        taken[u] = first + u * stride < vector_end && wanted(first + u * stride);
        if (taken[u]) packed[u] = *reinterpret_cast<const uint4*>(data + first + u * stride);
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u)
        if (taken[u]) add_squares(packed[u], sum);
    }
    scalar_begin = vector_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) {
    if (!wanted(i)) continue;
    const float g = bf16_to_f32(data[i]);
    sum += g * g;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) slots[table.first_slot[tensor] + slot] = sum;
}

// Two loads in flight a thread: measured on the H200 with the grid-stride kernel this one replaced (over the
// reference job's 3.1 B gradients 1.391 and 1.420 ms in two calls, against 1.422 with one and 1.520 with four,
// OptimizerAccessGpu.DISABLED_TimesReferenceJobSlots: ~4.4 TB/s either way, within the calls' noise).
constexpr int kNormVectorsInFlight = 2;

__global__ void __launch_bounds__(multi_tensor::kThreads)
    sum_partials_kernel(const float* __restrict__ partials, int64_t count, float* __restrict__ total) {
  gpu::wait_for_previous_kernel();
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) *total = sum;
}

// Fixed geometry (kMaxPartialBlocks blocks, grid-stride), so the same order on every GPU.
__global__ void __launch_bounds__(multi_tensor::kThreads)
    float_sum_partials_kernel(const float* __restrict__ values, int64_t count, float* __restrict__ partials) {
  gpu::wait_for_previous_kernel();
  float sum = 0.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    sum += values[i];
  sum = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void clip_coefficient_kernel(const float* __restrict__ norm_squared, double max_norm,
                                        float* __restrict__ coefficient) {
  gpu::wait_for_previous_kernel();
  const double coefficient_unclamped = max_norm / (sqrt(double(*norm_squared)) + 1e-6);
  // fmin would turn a NaN into 1 and hide a broken step; torch's clamp keeps it.
  *coefficient = float(isnan(coefficient_unclamped) ? coefficient_unclamped : fmin(coefficient_unclamped, 1.0));
}

}  // namespace

cudaError_t launch_grad_norm_partials(const GradNormTensor* tensors, int64_t count, float* slots, cudaStream_t stream) {
  GradNormTable table{};
  table.sparse_tensor = -1;
  int used = 0;
  int64_t blocks = 0;
  const auto flush = [&]() -> cudaError_t {
    if (used == 0) return cudaSuccess;
    table.count = used;
    gpu::launch_dependent(slot_partials_kernel<kNormVectorsInFlight>, unsigned(blocks), multi_tensor::kThreads, 0,
                          stream, table, slots);
    used = 0;
    blocks = 0;
    table.sparse_tensor = -1;
    return cudaGetLastError();
  };
  for (int64_t index = 0; index < count; ++index) {
    const int64_t slot_count = grad_norm_slot_count(tensors[index].numel);
    if (slot_count == 0) continue;
    table.data[used] = tensors[index].data;
    table.numel[used] = tensors[index].numel;
    table.first_slot[used] = tensors[index].first_slot;
    if (tensors[index].row_marked) {  // the launcher checked: at most one
      table.sparse_tensor = used;
      table.row_marked = tensors[index].row_marked;
      table.row_length = tensors[index].row_length;
    }
    blocks += slot_count;
    table.block_end[used] = blocks;
    // A launch of at most 2^31 - 1 blocks, the grid's limit (256 TB of gradients: never in practice).
    if (++used == GradNormTable::kMaxTensors || blocks > (int64_t(1) << 30))
      if (cudaError_t status = flush(); status != cudaSuccess) return status;
  }
  return flush();
}

cudaError_t launch_float_sum(const float* values, int64_t count, float* scratch, float* total, cudaStream_t stream) {
  static_assert(kFloatSumScratch == kMaxPartialBlocks);
  gpu::launch_dependent(float_sum_partials_kernel, kMaxPartialBlocks, multi_tensor::kThreads, 0, stream, values, count,
                        scratch);
  if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  gpu::launch_dependent(sum_partials_kernel, 1, multi_tensor::kThreads, 0, stream, scratch, kMaxPartialBlocks, total);
  return cudaGetLastError();
}

cudaError_t launch_clip_coefficient(const float* norm_squared, double max_norm, float* coefficient,
                                    cudaStream_t stream) {
  gpu::launch_dependent(clip_coefficient_kernel, 1, 1, 0, stream, norm_squared, max_norm, coefficient);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
