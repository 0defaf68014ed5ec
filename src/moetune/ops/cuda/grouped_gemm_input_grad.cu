// The experts' input gradients: dx[rows_e] = dy[rows_e] · W_e with W [E, K, N] as stored for the forward
// (e.g. d(permuted) = d(gate_up) · gate_up_e, gate_up_e [2I, H]). W_e stored [K, N] is an N-contiguous B
// operand, CUTLASS's RowMajor ("NN" GEMM).
#include "moetune/ops/cuda/grouped_gemm_cutlass.cuh"

namespace moetune::ops::cuda {
namespace {

// Ping-pong, 64x256x64 tiles (grouped_gemm_cutlass.cuh says why).
using Config = grouped_gemm_detail::GroupedGemmConfig<cutlass::layout::RowMajor, cutlass::layout::RowMajor,
                                                      cute::Shape<cute::_64, cute::_256, cute::_64>,
                                                      cute::Shape<cute::_2, cute::_1, cute::_1>>;

}  // namespace

template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::RowsTimesWeight>(int groups, int sm_count) {
  return grouped_gemm_detail::scratch_bytes<Config>(groups, sm_count);
}

template <>
std::string launch_grouped_gemm<GroupedGemmKind::RowsTimesWeight>(const GroupedGemmProblem& problem, void* scratch,
                                                                  size_t scratch_bytes, int sm_count,
                                                                  cudaStream_t stream) {
  return grouped_gemm_detail::run_rows_times_weight<Config>(problem, /*weight_row=*/problem.n, scratch, scratch_bytes,
                                                            sm_count, stream);
}

}  // namespace moetune::ops::cuda
