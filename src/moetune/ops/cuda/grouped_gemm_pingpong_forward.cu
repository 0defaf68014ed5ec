// GroupedGemmKind::RowsTimesWeightTPingpong: grouped_gemm_forward.cu's product with the ping-pong schedule and
// 64x256x64 tiles (each warpgroup on its own 64-row tile: half the padding of a 128-row tile in an expert's last
// one, and one warpgroup's epilogue beside the other's main loop), the engine's kernel where grouped_gemm.cpp says
// (the cooperative 128x256x64 tile elsewhere).
#include "moetune/ops/cuda/grouped_gemm_cutlass.cuh"

namespace moetune::ops::cuda {
namespace {

using Config = grouped_gemm_detail::GroupedGemmConfig<cutlass::layout::RowMajor, cutlass::layout::ColumnMajor,
                                                      cute::Shape<cute::_64, cute::_256, cute::_64>,
                                                      cute::Shape<cute::_2, cute::_1, cute::_1>,
                                                      grouped_gemm_detail::Pingpong>;

}  // namespace

template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::RowsTimesWeightTPingpong>(int groups, int sm_count) {
  return grouped_gemm_detail::scratch_bytes<Config>(groups, sm_count);
}

template <>
std::string launch_grouped_gemm<GroupedGemmKind::RowsTimesWeightTPingpong>(const GroupedGemmProblem& problem,
                                                                           void* scratch, size_t scratch_bytes,
                                                                           int sm_count, cudaStream_t stream) {
  return grouped_gemm_detail::run_rows_times_weight<Config>(problem, /*weight_row=*/problem.k, scratch,
                                                            scratch_bytes, sm_count, stream);
}

}  // namespace moetune::ops::cuda
