// The experts' forward products: out[rows_e] = x[rows_e] · W_eᵀ with W [E, N, K] as stored (gate_up [E, 2I, H],
// down [E, H, I]). W_e stored [N, K] is a K-contiguous B operand, CUTLASS's ColumnMajor ("TN" GEMM).
// Ping-pong, 64x256x64 tiles, 2x1 clusters: the default (grouped_gemm_cutlass.cuh says why).
#include "moetune/ops/cuda/grouped_gemm_cutlass.cuh"

namespace moetune::ops::cuda {
namespace {

using Config = grouped_gemm_detail::GroupedGemmConfig<cutlass::layout::RowMajor, cutlass::layout::ColumnMajor,
                                                      cute::Shape<cute::_64, cute::_256, cute::_64>,
                                                      cute::Shape<cute::_2, cute::_1, cute::_1>>;
constexpr auto kKind = GroupedGemmKind::RowsTimesWeightT;
constexpr auto kTile = GroupedGemmTile::PingPong64x256Cluster2x1;

}  // namespace

template <>
size_t grouped_gemm_scratch_bytes<kKind, kTile>(int groups, int sm_count) {
  return grouped_gemm_detail::scratch_bytes<Config>(groups, sm_count);
}

template <>
std::string launch_grouped_gemm<kKind, kTile>(const GroupedGemmProblem& problem, void* scratch, size_t scratch_bytes,
                                             int sm_count, cudaStream_t stream) {
  return grouped_gemm_detail::run_rows_times_weight<Config>(problem, /*weight_row=*/problem.k, scratch,
                                                            scratch_bytes, sm_count, stream);
}

}  // namespace moetune::ops::cuda
