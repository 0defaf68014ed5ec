// Token permutation for the experts' grouped GEMM, the combine that undoes it, and their backwards.
// The plan is a stable radix sort of the (token, choice) pairs on expert id (CUB), whose low ceil(log2 E) key
// bits are all it needs to look at; the row kernels are gathers (one warp per output row, 16-byte vectors where
// the row allows) so that every output row is written by one warp, without atomics and deterministically.
#include <cuda_bf16.h>

#include <climits>
#include <cub/device/device_radix_sort.cuh>
#include <initializer_list>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/permute_kernel_choice.h"
#include "moetune/ops/cuda/permute_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpsPerBlock * kWarpSize;
constexpr size_t kWorkspaceAlignment = 256;

__device__ __forceinline__ int64_t global_warp() {
  return int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}
__device__ __forceinline__ int lane_id() { return int(threadIdx.x) % kWarpSize; }

// ---- the plan ---------------------------------------------------------------------------------------------

__global__ void iota_kernel(int32_t* values, int64_t n) {
  gpu::wait_for_previous_kernel();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) values[i] = int32_t(i);
}

// Row r of the sorted order: its choice's row and source, and the offsets of the experts whose first row it is
// (every expert after the previous row's and up to its own, so experts with no rows get offsets too).
__global__ void scatter_plan_kernel(const uint32_t* __restrict__ sorted_experts,
                                    const int32_t* __restrict__ sorted_choices, int64_t choices, int top_k,
                                    int experts, int32_t* __restrict__ offsets, int32_t* __restrict__ row_of,
                                    int32_t* __restrict__ source) {
  gpu::wait_for_previous_kernel();
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= choices) return;
  const int32_t choice = sorted_choices[r];
  source[r] = choice / top_k;
  row_of[choice] = int32_t(r);
  const unsigned last = unsigned(experts - 1);  // clamping keeps invalid ids inside offsets
  const int expert = int(min(sorted_experts[r], last));
  const int previous = r == 0 ? -1 : int(min(sorted_experts[r - 1], last));
  for (int e = previous + 1; e <= expert; ++e) offsets[e] = int32_t(r);
  if (r == choices - 1)
    for (int e = expert + 1; e <= experts; ++e) offsets[e] = int32_t(choices);
}

int key_bits(int experts) {
  int bits = 1;
  while ((int64_t(1) << bits) < experts) ++bits;
  return bits;
}

size_t aligned(size_t bytes) { return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; }

// Workspace: sorted keys, the choice indices before and after sorting, then CUB's own scratch.
struct PlanWorkspace {
  uint32_t* sorted_experts;
  int32_t* choices_in;
  int32_t* sorted_choices;
  void* sort_scratch;
  size_t sort_scratch_bytes;
};

size_t plan_arrays_bytes(int64_t choices) { return 3 * aligned(size_t(choices) * sizeof(int32_t)); }

cudaError_t sort_scratch_bytes(int64_t choices, int experts, size_t* bytes) {
  *bytes = 0;
  return cub::DeviceRadixSort::SortPairs(nullptr, *bytes, static_cast<const uint32_t*>(nullptr),
                                         static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                         static_cast<int32_t*>(nullptr), int(choices), 0, key_bits(experts));
}

// ---- the row kernels ----------------------------------------------------------------------------------------

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename Unit>
__global__ void permute_rows_kernel(const Unit* __restrict__ x, const int32_t* __restrict__ source, int64_t rows,
                                    int64_t units_per_row, Unit* __restrict__ out) {
  gpu::wait_for_previous_kernel();
  const int64_t row = global_warp();
  if (row >= rows) return;
  const Unit* from = x + int64_t(source[row]) * units_per_row;
  Unit* to = out + row * units_per_row;
  for (int64_t i = lane_id(); i < units_per_row; i += kWarpSize) to[i] = from[i];
}

// A gather-sum's column of kVec sums: started from the residual's values (zero without one), stored rounded.
template <typename T, int kVec>
__device__ __forceinline__ void start_sum(const T* residual, float (&acc)[kVec]) {
  if (residual) {
    const Pack<T, kVec> r = *reinterpret_cast<const Pack<T, kVec>*>(residual);
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = to_f32(r.v[i]);
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;
  }
}

template <typename T, int kVec>
__device__ __forceinline__ void store_sum(const float (&acc)[kVec], T* out) {
  Pack<T, kVec> o;
#pragma unroll
  for (int i = 0; i < kVec; ++i) o.v[i] = from_f32<T>(acc[i]);
  *reinterpret_cast<Pack<T, kVec>*>(out) = o;
}

// residual and out may be the same rows: each element is read before the same thread writes it.
template <typename T, int kVec>
__global__ void gather_sum_rows_kernel(const T* __restrict__ rows, const int32_t* __restrict__ row_of,
                                       const float* __restrict__ weights, const T* residual, int64_t tokens,
                                       int top_k, int64_t hidden, int64_t kept_rows, T* out) {
  gpu::wait_for_previous_kernel();
  using P = Pack<T, kVec>;
  const int64_t token = global_warp();
  if (token >= tokens) return;
  const int32_t* token_rows = row_of + token * top_k;
  const float* token_weights = weights ? weights + token * top_k : nullptr;
  for (int64_t c = lane_id(); c < hidden / kVec; c += kWarpSize) {
    const int64_t column = c * kVec;
    float acc[kVec];
    start_sum<T, kVec>(residual ? residual + token * hidden + column : nullptr, acc);
    for (int j = 0; j < top_k; ++j) {
      const int64_t row = token_rows[j];
      if (row >= kept_rows) continue;  // a choice made elsewhere: it names no row here
      const float w = token_weights ? token_weights[j] : 1.0f;
      const P y = *reinterpret_cast<const P*>(rows + row * hidden + column);
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] += w * to_f32(y.v[i]);
    }
    store_sum<T, kVec>(acc, out + token * hidden + column);
  }
}

// gather_sum_rows_kernel for top_k <= kMaxHoistedChoices: the token's rows and weights are read once into
// registers, and the loads of all its rows for a column are issued before any is summed (the loop above issues
// them one choice at a time), so that a lane has top_k + 1 16-byte loads in flight. Same sums in the same order.
constexpr int kMaxHoistedChoices = 8;

template <typename T, int kVec>
__global__ void gather_sum_hoisted_rows_kernel(const T* __restrict__ rows, const int32_t* __restrict__ row_of,
                                               const float* __restrict__ weights, const T* residual, int64_t tokens,
                                               int top_k, int64_t hidden, int64_t kept_rows, T* out) {
  gpu::wait_for_previous_kernel();
  using P = Pack<T, kVec>;
  const int64_t token = global_warp();
  if (token >= tokens) return;
  int64_t row[kMaxHoistedChoices];
  float w[kMaxHoistedChoices];
#pragma unroll
  for (int j = 0; j < kMaxHoistedChoices; ++j) {
    row[j] = j < top_k ? int64_t(row_of[token * top_k + j]) : kept_rows;  // kept_rows: skipped below
    w[j] = j < top_k && weights ? weights[token * top_k + j] : 1.0f;
  }
  for (int64_t c = lane_id(); c < hidden / kVec; c += kWarpSize) {
    const int64_t column = c * kVec;
    float acc[kVec];
    start_sum<T, kVec>(residual ? residual + token * hidden + column : nullptr, acc);
    P y[kMaxHoistedChoices];
#pragma unroll
    for (int j = 0; j < kMaxHoistedChoices; ++j)
      if (row[j] < kept_rows) y[j] = *reinterpret_cast<const P*>(rows + row[j] * hidden + column);
#pragma unroll
    for (int j = 0; j < kMaxHoistedChoices; ++j) {
      if (row[j] >= kept_rows) continue;  // past top_k, or a choice made elsewhere: it names no row here
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] += w[j] * to_f32(y[j].v[i]);
    }
    store_sum<T, kVec>(acc, out + token * hidden + column);
  }
}

// One warp per choice: writes its permuted row's gradient and reduces its weight's gradient across the warp.
template <typename T, int kVec>
__global__ void combine_backward_kernel(const T* __restrict__ dout, const T* __restrict__ expert_out,
                                        const int32_t* __restrict__ row_of, const float* __restrict__ weights,
                                        int64_t choices, int top_k, int64_t hidden, int64_t kept_rows,
                                        T* __restrict__ dexpert_out, float* __restrict__ dweights) {
  gpu::wait_for_previous_kernel();
  using P = Pack<T, kVec>;
  const int64_t choice = global_warp();
  if (choice >= choices) return;
  const int64_t token = choice / top_k, row = row_of[choice];
  if (row >= kept_rows) {  // a choice made elsewhere: no row here, and no part in this rank's weights' gradient
    if (lane_id() == 0) dweights[choice] = 0.0f;
    return;
  }
  const float w = weights[choice];
  float dot = 0.0f;
  for (int64_t c = lane_id(); c < hidden / kVec; c += kWarpSize) {
    const int64_t column = c * kVec;
    const P d = *reinterpret_cast<const P*>(dout + token * hidden + column);
    const P y = *reinterpret_cast<const P*>(expert_out + row * hidden + column);
    P dy;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float di = to_f32(d.v[i]);
      dy.v[i] = from_f32<T>(w * di);
      dot += di * to_f32(y.v[i]);
    }
    *reinterpret_cast<P*>(dexpert_out + row * hidden + column) = dy;
  }
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) dot += __shfl_xor_sync(kFullWarp, dot, offset);
  if (lane_id() == 0) dweights[choice] = dot;
}

// ---- launch helpers -----------------------------------------------------------------------------------------

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Grid for one warp per item; 0 when the item count does not fit a grid.
unsigned warp_grid(int64_t items) {
  const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
  return blocks > INT_MAX ? 0u : unsigned(blocks);
}

template <typename Unit>
cudaError_t launch_copy_rows(const void* x, const int32_t* source, int64_t rows, int64_t row_bytes, void* out,
                             cudaStream_t stream) {
  gpu::launch_dependent(permute_rows_kernel<Unit>, warp_grid(rows), kThreads, 0, stream, static_cast<const Unit*>(x),
                        source, rows, row_bytes / int64_t(sizeof(Unit)), static_cast<Unit*>(out));
  return cudaGetLastError();
}

// 16-byte packs when the row length and every base pointer allow them (rows then stay aligned too), else
// one element at a time.
template <typename T>
bool use_packs(int64_t hidden, std::initializer_list<const void*> pointers) {
  constexpr int kVec = 16 / sizeof(T);
  if (hidden % kVec != 0) return false;
  for (const void* p : pointers)
    if (p && !aligned_to(p, 16)) return false;
  return true;
}

template <typename T>
cudaError_t launch_gather_sum_typed(const void* rows, const int32_t* row_of, const float* weights,
                                    const void* residual, int64_t tokens, int top_k, int64_t hidden,
                                    int64_t kept_rows, void* out, bool hoisted, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const unsigned grid = warp_grid(tokens);
  if (grid == 0) return cudaErrorInvalidValue;
  const T* in = static_cast<const T*>(rows);
  const T* res = static_cast<const T*>(residual);
  T* dst = static_cast<T*>(out);
  const bool packs = use_packs<T>(hidden, {rows, residual, out});
  if (hoisted && packs && top_k <= kMaxHoistedChoices)
    gpu::launch_dependent(gather_sum_hoisted_rows_kernel<T, kVec>, grid, kThreads, 0, stream, in, row_of, weights, res,
                          tokens, top_k, hidden, kept_rows, dst);
  else if (packs)
    gpu::launch_dependent(gather_sum_rows_kernel<T, kVec>, grid, kThreads, 0, stream, in, row_of, weights, res, tokens,
                          top_k, hidden, kept_rows, dst);
  else
    gpu::launch_dependent(gather_sum_rows_kernel<T, 1>, grid, kThreads, 0, stream, in, row_of, weights, res, tokens,
                          top_k, hidden, kept_rows, dst);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_combine_backward_typed(const void* dout, const void* expert_out, const int32_t* row_of,
                                          const float* weights, int64_t tokens, int top_k, int64_t hidden,
                                          int64_t kept_rows, void* dexpert_out, float* dweights, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t choices = tokens * top_k;
  const unsigned grid = warp_grid(choices);
  if (grid == 0) return cudaErrorInvalidValue;
  const T* d = static_cast<const T*>(dout);
  const T* y = static_cast<const T*>(expert_out);
  T* dy = static_cast<T*>(dexpert_out);
  if (use_packs<T>(hidden, {dout, expert_out, dexpert_out}))
    gpu::launch_dependent(combine_backward_kernel<T, kVec>, grid, kThreads, 0, stream, d, y, row_of, weights, choices,
                          top_k, hidden, kept_rows, dy, dweights);
  else
    gpu::launch_dependent(combine_backward_kernel<T, 1>, grid, kThreads, 0, stream, d, y, row_of, weights, choices,
                          top_k, hidden, kept_rows, dy, dweights);
  return cudaGetLastError();
}

}  // namespace

cudaError_t permutation_workspace_bytes(int64_t choices, int experts, size_t* bytes) {
  *bytes = 0;
  if (choices < 0 || choices > INT_MAX || experts < 1) return cudaErrorInvalidValue;
  if (choices == 0) return cudaSuccess;
  size_t scratch = 0;
  if (const cudaError_t status = sort_scratch_bytes(choices, experts, &scratch); status != cudaSuccess) return status;
  *bytes = plan_arrays_bytes(choices) + aligned(scratch);
  return cudaSuccess;
}

cudaError_t launch_plan_permutation(const int32_t* expert_ids, int64_t choices, int top_k, int experts,
                                    void* workspace, size_t workspace_bytes, int32_t* offsets, int32_t* row_of,
                                    int32_t* source, cudaStream_t stream) {
  if (choices < 0 || choices > INT_MAX || top_k < 1 || experts < 1 || choices % top_k != 0)
    return cudaErrorInvalidValue;
  if (choices == 0) return cudaMemsetAsync(offsets, 0, sizeof(int32_t) * size_t(experts + 1), stream);
  size_t needed = 0;
  if (const cudaError_t status = permutation_workspace_bytes(choices, experts, &needed); status != cudaSuccess)
    return status;
  if (workspace == nullptr || workspace_bytes < needed) return cudaErrorInvalidValue;

  char* base = static_cast<char*>(workspace);
  const size_t array_bytes = aligned(size_t(choices) * sizeof(int32_t));
  PlanWorkspace ws{reinterpret_cast<uint32_t*>(base), reinterpret_cast<int32_t*>(base + array_bytes),
                   reinterpret_cast<int32_t*>(base + 2 * array_bytes), base + plan_arrays_bytes(choices),
                   workspace_bytes - plan_arrays_bytes(choices)};
  constexpr int kPlanThreads = 256;
  const unsigned blocks = unsigned((choices + kPlanThreads - 1) / kPlanThreads);
  gpu::launch_dependent(iota_kernel, blocks, kPlanThreads, 0, stream, ws.choices_in, choices);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  // Radix sort is stable, so equal experts keep choice order, which is token order.
  if (const cudaError_t status = cub::DeviceRadixSort::SortPairs(
          ws.sort_scratch, ws.sort_scratch_bytes, reinterpret_cast<const uint32_t*>(expert_ids), ws.sorted_experts,
          ws.choices_in, ws.sorted_choices, int(choices), 0, key_bits(experts), stream);
      status != cudaSuccess)
    return status;
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  gpu::launch_dependent(scatter_plan_kernel, blocks, kPlanThreads, 0, stream, ws.sorted_experts, ws.sorted_choices,
                        choices, top_k, experts, offsets, row_of, source);
  return cudaGetLastError();
}

cudaError_t launch_permute_rows(const void* x, const int32_t* source, int64_t rows, int64_t row_bytes, void* out,
                                cudaStream_t stream) {
  if (rows < 0 || row_bytes < 0 || (rows > 0 && warp_grid(rows) == 0)) return cudaErrorInvalidValue;
  if (rows == 0 || row_bytes == 0) return cudaSuccess;
  // The widest unit that divides the row and both base addresses.
  for (size_t unit : {16, 8, 4, 2}) {
    if (row_bytes % int64_t(unit) != 0 || !aligned_to(x, unit) || !aligned_to(out, unit)) continue;
    switch (unit) {
      case 16: return launch_copy_rows<uint4>(x, source, rows, row_bytes, out, stream);
      case 8: return launch_copy_rows<uint2>(x, source, rows, row_bytes, out, stream);
      case 4: return launch_copy_rows<uint32_t>(x, source, rows, row_bytes, out, stream);
      case 2: return launch_copy_rows<uint16_t>(x, source, rows, row_bytes, out, stream);
    }
  }
  return launch_copy_rows<uint8_t>(x, source, rows, row_bytes, out, stream);
}

cudaError_t launch_gather_sum_rows_with(bool hoisted, RowType type, const void* rows, const int32_t* row_of,
                                        const float* weights, const void* residual, int64_t tokens, int top_k,
                                        int64_t hidden, int64_t kept_rows, void* out, cudaStream_t stream) {
  if (tokens < 0 || top_k < 1 || hidden < 0) return cudaErrorInvalidValue;
  if (tokens == 0 || hidden == 0) return cudaSuccess;
  switch (type) {
    case RowType::F32:
      return launch_gather_sum_typed<float>(rows, row_of, weights, residual, tokens, top_k, hidden, kept_rows, out,
                                            hoisted, stream);
    case RowType::BF16:
      return launch_gather_sum_typed<__nv_bfloat16>(rows, row_of, weights, residual, tokens, top_k, hidden, kept_rows,
                                                    out, hoisted, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_gather_sum_rows(RowType type, const void* rows, const int32_t* row_of, const float* weights,
                                   const void* residual, int64_t tokens, int top_k, int64_t hidden, int64_t kept_rows,
                                   void* out, cudaStream_t stream) {
  return launch_gather_sum_rows_with(/*hoisted=*/true, type, rows, row_of, weights, residual, tokens, top_k, hidden,
                                     kept_rows, out, stream);
}

cudaError_t launch_combine_backward(RowType type, const void* dout, const void* expert_out, const int32_t* row_of,
                                    const float* weights, int64_t tokens, int top_k, int64_t hidden,
                                    int64_t kept_rows, void* dexpert_out, float* dweights, cudaStream_t stream) {
  if (tokens < 0 || top_k < 1 || hidden < 0) return cudaErrorInvalidValue;
  if (tokens == 0) return cudaSuccess;
  // hidden == 0 still runs: every dweight is then an empty sum, 0.
  switch (type) {
    case RowType::F32:
      return launch_combine_backward_typed<float>(dout, expert_out, row_of, weights, tokens, top_k, hidden, kept_rows,
                                                  dexpert_out, dweights, stream);
    case RowType::BF16:
      return launch_combine_backward_typed<__nv_bfloat16>(dout, expert_out, row_of, weights, tokens, top_k, hidden,
                                                          kept_rows, dexpert_out, dweights, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace moetune::ops::cuda
