// The experts' forward projections: out[rows_e] = x[rows_e] · W_eᵀ with W [E, N, K] (gate_up [E, 2I, H],
// down [E, H, I]). W_e stored [N, K] is a K-contiguous B operand, CUTLASS's ColumnMajor ("TN" GEMM).
#include "moetune/ops/cuda/grouped_gemm_cutlass.cuh"

namespace moetune::ops::cuda {
namespace {

// Ping-pong, 64x256x64 tiles (grouped_gemm_cutlass.cuh says why).
using Config = grouped_gemm_detail::GroupedGemmConfig<cutlass::layout::RowMajor, cutlass::layout::ColumnMajor,
                                                      cute::Shape<cute::_64, cute::_256, cute::_64>,
                                                      cute::Shape<cute::_2, cute::_1, cute::_1>>;

}  // namespace

template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::RowsTimesWeightT>(int groups, int sm_count) {
  return grouped_gemm_detail::scratch_bytes<Config>(groups, sm_count);
}

template <>
std::string launch_grouped_gemm<GroupedGemmKind::RowsTimesWeightT>(const GroupedGemmProblem& problem, void* scratch,
                                                                   size_t scratch_bytes, int sm_count,
                                                                   cudaStream_t stream) {
  return grouped_gemm_detail::run_rows_times_weight<Config>(problem, /*weight_row=*/problem.k, scratch, scratch_bytes,
                                                            sm_count, stream);
}

}  // namespace moetune::ops::cuda
