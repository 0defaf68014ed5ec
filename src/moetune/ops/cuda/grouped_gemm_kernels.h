// Launchers of the experts' grouped GEMMs (CUTLASS SM90: TMA + wgmma, warp-specialized, persistent grouped
// tile scheduler): raw pointers in, an error message out ("" on success). Group e owns rows
// [offsets[e], offsets[e+1]) of the row-major operands; offsets live on the device and are read only there.
// Kept free of the engine's host headers (nvcc cannot compile fmt); ops/cuda/grouped_gemm.cpp wraps them for
// Tensors and owns the scratch memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace moetune::ops::cuda {

// One kernel per operand arrangement; each is instantiated in its own .cu file.
enum class GroupedGemmKind {
  RowsTimesWeightT,  // out[rows_e] = x[rows_e] · W_eᵀ, W [E, N, K] (forward)      grouped_gemm_forward.cu
  RowsTimesWeight,   // out[rows_e] = x[rows_e] · W_e,  W [E, K, N] (input grad)   grouped_gemm_input_grad.cu
  WeightGrad,        // dW_e (+)= dy[rows_e]ᵀ · x[rows_e], dW [E, N, K]             grouped_gemm_weight_grad.cu
};

// All operands bf16, row-major, 16-byte aligned; n and k multiples of 8; 0 < rows < 2^31; groups > 0.
struct GroupedGemmProblem {
  const void* a;           // x [rows, k] (RowsTimesWeight*), dy [rows, n] (WeightGrad)
  const void* b;           // the weights (RowsTimesWeight*), x [rows, k] (WeightGrad)
  void* out;               // out [rows, n] (RowsTimesWeight*), dW [groups, n, k] (WeightGrad)
  const int32_t* offsets;  // device [groups + 1]
  int64_t rows;
  int groups;
  int n, k;
  bool accumulate;   // out (+)= : added to what out holds instead of overwriting it
  float alpha = 1;   // out = alpha · product (+ out): LoRA's scale applied in the epilogue
  // WeightGrad only, without accumulate (or null): grouped_weight_grad_norm_slots floats the epilogue fills with
  // partial sums of dW's squares (its bf16 values, as stored), each written by one warp in a fixed order; their
  // sum is Σ dW² (grouped_gemm_square_sum.cuh). Empty groups' slots are written 0.
  float* norm_partials = nullptr;
};

// WeightGrad's schedule: by the experts' average row count (rows / groups: cooperative 128x256 tiles below 384,
// ping-pong 64x256 from there; grouped_gemm_weight_grad.cu has the measurements), or one of the two for every
// problem (the GPU tests run both). The process starts with MOETUNE_WEIGHT_GRAD_SCHEDULE's (rows | ping-pong |
// cooperative; unset: rows), for alternating the two in whole runs.
enum class WeightGradSchedule { ByRows, PingPong, Cooperative };
void set_weight_grad_schedule(WeightGradSchedule schedule);

// How many floats WeightGrad's norm partials take for dW [groups, n, k]: one per warp of every output tile.
int64_t grouped_weight_grad_norm_slots(int groups, int n, int k);

// Device scratch one launch needs (per-group shapes, pointers and strides, CUTLASS's workspace) on a GPU with
// `sm_count` multiprocessors. The caller allocates it and may free it stream-ordered once the launch is queued.
template <GroupedGemmKind kind>
size_t grouped_gemm_scratch_bytes(int groups, int sm_count);

// Queues the whole product on `stream`; nothing is read back to the host.
template <GroupedGemmKind kind>
std::string launch_grouped_gemm(const GroupedGemmProblem& problem, void* scratch, size_t scratch_bytes, int sm_count,
                                cudaStream_t stream);

// Each kind is specialised in its own .cu file (see GroupedGemmKind).
template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::RowsTimesWeightT>(int groups, int sm_count);
template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::RowsTimesWeight>(int groups, int sm_count);
template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::WeightGrad>(int groups, int sm_count);
template <>
std::string launch_grouped_gemm<GroupedGemmKind::RowsTimesWeightT>(const GroupedGemmProblem& problem, void* scratch,
                                                                   size_t scratch_bytes, int sm_count,
                                                                   cudaStream_t stream);
template <>
std::string launch_grouped_gemm<GroupedGemmKind::RowsTimesWeight>(const GroupedGemmProblem& problem, void* scratch,
                                                                  size_t scratch_bytes, int sm_count,
                                                                  cudaStream_t stream);
template <>
std::string launch_grouped_gemm<GroupedGemmKind::WeightGrad>(const GroupedGemmProblem& problem, void* scratch,
                                                             size_t scratch_bytes, int sm_count, cudaStream_t stream);

}  // namespace moetune::ops::cuda
