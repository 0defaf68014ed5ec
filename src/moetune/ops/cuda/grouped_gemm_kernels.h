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

// One operand arrangement per kind; each kind has kernels of one or more tiles (below).
enum class GroupedGemmKind {
  RowsTimesWeightT,  // out[rows_e] = x[rows_e] · W_eᵀ, W [E, N, K] (forward)
  RowsTimesWeight,   // out[rows_e] = x[rows_e] · W_e,  W [E, K, N] (input grad)
  WeightGrad,        // dW_e (+)= dy[rows_e]ᵀ · x[rows_e], dW [E, N, K]
};

// A CTA tile (M x N, K 64), the thread-block cluster that shares operand tiles through TMA multicast, and the
// consumer schedule (grouped_gemm_cutlass.cuh says what ping-pong and cooperative are). A cluster of 2 along M
// rounds every group's M tiles up to an even count, and CUTLASS runs the padding tile in full (zero-filled
// loads, clipped stores): half a 64-row tile per group on average, ~4-6% of the MMA at 512-768 rows an expert.
// Without a cluster nothing is padded, but each CTA reads its weight tile from L2 alone. Which tile wins
// depends on the shape and, it seems, on the data (docs/benchmarks.md, session 12), so the forward has three,
// timed on each problem's first call (grouped_gemm.cpp). All three compute every output element with the same
// MMAs in the same order: their results are bit-identical.
enum class GroupedGemmTile {
  PingPong64x256Cluster2x1,
  PingPong64x256Cluster1x1,
  Cooperative128x256Cluster1x1,
  PingPong128x128Cluster2x1,
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
};

// Device scratch one launch needs (per-group shapes, pointers and strides, CUTLASS's workspace) on a GPU with
// `sm_count` multiprocessors. The caller allocates it and may free it stream-ordered once the launch is queued.
template <GroupedGemmKind kind, GroupedGemmTile tile>
size_t grouped_gemm_scratch_bytes(int groups, int sm_count);

// Queues the whole product on `stream`; nothing is read back to the host.
template <GroupedGemmKind kind, GroupedGemmTile tile>
std::string launch_grouped_gemm(const GroupedGemmProblem& problem, void* scratch, size_t scratch_bytes, int sm_count,
                                cudaStream_t stream);

// Every compiled kernel, each specialised in its own .cu file: kind, tile, file. The first of a kind is its
// default (the one chosen when nothing else is known to be faster).
#define MOETUNE_GROUPED_GEMM_KERNELS(X)                                                        \
  X(RowsTimesWeightT, PingPong64x256Cluster2x1)     /* grouped_gemm_forward.cu */              \
  X(RowsTimesWeightT, PingPong64x256Cluster1x1)     /* grouped_gemm_forward_64x256_1x1.cu */   \
  X(RowsTimesWeightT, Cooperative128x256Cluster1x1) /* grouped_gemm_forward_128x256_coop.cu */ \
  X(RowsTimesWeight, PingPong64x256Cluster2x1)      /* grouped_gemm_input_grad.cu */           \
  X(WeightGrad, PingPong128x128Cluster2x1)          /* grouped_gemm_weight_grad.cu */

#define MOETUNE_DECLARE_GROUPED_GEMM_KERNEL(kind, tile)                                                    \
  template <>                                                                                              \
  size_t grouped_gemm_scratch_bytes<GroupedGemmKind::kind, GroupedGemmTile::tile>(int groups, int sm_count); \
  template <>                                                                                              \
  std::string launch_grouped_gemm<GroupedGemmKind::kind, GroupedGemmTile::tile>(                           \
      const GroupedGemmProblem& problem, void* scratch, size_t scratch_bytes, int sm_count, cudaStream_t stream);
MOETUNE_GROUPED_GEMM_KERNELS(MOETUNE_DECLARE_GROUPED_GEMM_KERNEL)
#undef MOETUNE_DECLARE_GROUPED_GEMM_KERNEL

// The same kernels as a table, for choosing one at run time.
struct GroupedGemmKernel {
  GroupedGemmKind kind;
  GroupedGemmTile tile;
  size_t (*scratch_bytes)(int groups, int sm_count);
  std::string (*launch)(const GroupedGemmProblem& problem, void* scratch, size_t scratch_bytes, int sm_count,
                        cudaStream_t stream);
};

#define MOETUNE_GROUPED_GEMM_KERNEL_ENTRY(kind, tile)                                            \
  GroupedGemmKernel{GroupedGemmKind::kind, GroupedGemmTile::tile,                                \
                    &grouped_gemm_scratch_bytes<GroupedGemmKind::kind, GroupedGemmTile::tile>,   \
                    &launch_grouped_gemm<GroupedGemmKind::kind, GroupedGemmTile::tile>},
inline constexpr GroupedGemmKernel kGroupedGemmKernels[] = {
    MOETUNE_GROUPED_GEMM_KERNELS(MOETUNE_GROUPED_GEMM_KERNEL_ENTRY)};
#undef MOETUNE_GROUPED_GEMM_KERNEL_ENTRY

}  // namespace moetune::ops::cuda
