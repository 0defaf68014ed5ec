// Expert parallelism's exchange plan on the GPU: which rows go to which rank, laid out by destination in token
// order, without the host. One thread per token marks the ranks its choices go to ([ranks, tokens] flags,
// rank-major) and counts the choices per rank; an exclusive scan of the flags (CUB) gives every (rank, token)
// pair its row, already grouped by rank; one thread per token then writes its rows.
#include <climits>
#include <cub/device/device_scan.cuh>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/exchange_plan_kernels.h"

namespace moetune::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kAlignment = 256;

size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

__global__ void mark_ranks_kernel(const int32_t* __restrict__ expert_ids, int64_t tokens, int top_k, int local_experts,
                                  int32_t* __restrict__ flags, int32_t* __restrict__ choices_to) {
  gpu::wait_for_previous_kernel();
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  for (int j = 0; j < top_k; ++j) {
    const int r = expert_ids[t * top_k + j] / local_experts;
    flags[int64_t(r) * tokens + t] = 1;  // several choices may set it: same value
    atomicAdd(&choices_to[r], 1);
  }
}

__global__ void place_rows_kernel(const int32_t* __restrict__ expert_ids, int64_t tokens, int top_k, int local_experts,
                                  int ranks, const int32_t* __restrict__ flags, const int32_t* __restrict__ rows,
                                  const int32_t* __restrict__ choices_to, int64_t* __restrict__ counts,
                                  int32_t* __restrict__ token_of_row, int32_t* __restrict__ local_choice,
                                  int32_t* __restrict__ row_to_rank) {
  gpu::wait_for_previous_kernel();
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const int64_t last = int64_t(ranks) * tokens - 1;
  const int32_t sent = rows[last] + flags[last];
  if (t == 0)
    for (int r = 0; r < ranks; ++r) {
      const int64_t end = int64_t(r + 1) * tokens - 1;
      counts[2 * r] = rows[end] + flags[end] - rows[int64_t(r) * tokens];
      counts[2 * r + 1] = choices_to[r];
    }
  for (int r = 0; r < ranks; ++r) {
    const int64_t at = int64_t(r) * tokens + t;
    if (!flags[at]) {
      row_to_rank[t * ranks + r] = sent;
      continue;
    }
    const int32_t row = rows[at];
    row_to_rank[t * ranks + r] = row;
    token_of_row[row] = int32_t(t);
    for (int j = 0; j < top_k; ++j) {
      const int e = expert_ids[t * top_k + j];
      local_choice[int64_t(row) * top_k + j] = e / local_experts == r ? e % local_experts : local_experts;
    }
  }
}

// Workspace: flags, rows (the scan), per-rank choice counts, then CUB's scratch.
struct PlanWorkspace {
  int32_t *flags, *rows, *choices_to;
  void* scan_scratch;
  size_t scan_scratch_bytes;
};

size_t scan_scratch_bytes(int64_t items) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                int(items));
  return bytes;
}

size_t arrays_bytes(int64_t tokens, int64_t ranks) {
  return 2 * aligned(size_t(tokens * ranks) * sizeof(int32_t)) + aligned(size_t(ranks) * sizeof(int32_t));
}

}  // namespace

cudaError_t exchange_plan_workspace_bytes(int64_t tokens, int64_t ranks, size_t* bytes) {
  *bytes = 0;
  if (tokens < 0 || ranks < 1 || tokens * ranks > INT32_MAX) return cudaErrorInvalidValue;
  *bytes = arrays_bytes(tokens, ranks) + aligned(scan_scratch_bytes(tokens * ranks));
  return cudaSuccess;
}

cudaError_t launch_exchange_plan(const int32_t* expert_ids, int64_t tokens, int top_k, int local_experts, int ranks,
                                 void* workspace, size_t workspace_bytes, int64_t* counts, int32_t* token_of_row,
                                 int32_t* local_choice, int32_t* row_to_rank, cudaStream_t stream) {
  size_t needed = 0;
  if (top_k < 1 || local_experts < 1) return cudaErrorInvalidValue;
  if (const cudaError_t status = exchange_plan_workspace_bytes(tokens, ranks, &needed); status != cudaSuccess)
    return status;
  if (tokens == 0) return cudaMemsetAsync(counts, 0, sizeof(int64_t) * size_t(2 * ranks), stream);
  if (workspace == nullptr || workspace_bytes < needed) return cudaErrorInvalidValue;
  char* base = static_cast<char*>(workspace);
  const size_t array = aligned(size_t(tokens * ranks) * sizeof(int32_t));
  PlanWorkspace ws{reinterpret_cast<int32_t*>(base), reinterpret_cast<int32_t*>(base + array),
                   reinterpret_cast<int32_t*>(base + 2 * array), base + arrays_bytes(tokens, ranks),
                   workspace_bytes - arrays_bytes(tokens, ranks)};
  // flags and choices_to start at zero (contiguous up to the scan's scratch).
  if (const cudaError_t status = cudaMemsetAsync(ws.flags, 0, array, stream); status != cudaSuccess) return status;
  if (const cudaError_t status = cudaMemsetAsync(ws.choices_to, 0, sizeof(int32_t) * size_t(ranks), stream);
      status != cudaSuccess)
    return status;
  const unsigned blocks = unsigned((tokens + kThreads - 1) / kThreads);
  gpu::launch_dependent(mark_ranks_kernel, blocks, kThreads, 0, stream, expert_ids, tokens, top_k, local_experts,
                        ws.flags, ws.choices_to);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
  if (const cudaError_t status = cub::DeviceScan::ExclusiveSum(ws.scan_scratch, ws.scan_scratch_bytes, ws.flags, ws.rows,
                                                               int(tokens * ranks), stream);
      status != cudaSuccess)
    return status;
  gpu::launch_dependent(place_rows_kernel, blocks, kThreads, 0, stream, expert_ids, tokens, top_k, local_experts, ranks,
                        ws.flags, ws.rows, ws.choices_to, counts, token_of_row, local_choice, row_to_rank);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
