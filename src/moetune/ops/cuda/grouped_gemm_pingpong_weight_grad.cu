// GroupedGemmKind::WeightGradPingpong: grouped_gemm_weight_grad.cu's product with the ping-pong schedule and
// 128x128x64 tiles (one warpgroup's epilogue beside the other's main loop: the K of a weight gradient is the
// expert's row count, often short), for the MoE layer's benchmark to compare against the default.
#include "moetune/ops/cuda/grouped_gemm_weight_grad.cuh"

namespace moetune::ops::cuda {
namespace {

using Config = grouped_gemm_detail::WeightGradConfig<cute::Shape<cute::_128, cute::_128, cute::_64>,
                                                     cute::Shape<cute::_2, cute::_1, cute::_1>,
                                                     grouped_gemm_detail::Pingpong>;

}  // namespace

template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::WeightGradPingpong>(int groups, int sm_count) {
  return grouped_gemm_detail::scratch_bytes<Config>(groups, sm_count);
}

template <>
std::string launch_grouped_gemm<GroupedGemmKind::WeightGradPingpong>(const GroupedGemmProblem& problem, void* scratch,
                                                                     size_t scratch_bytes, int sm_count,
                                                                     cudaStream_t stream) {
  return grouped_gemm_detail::run_weight_grad<Config>(problem, scratch, scratch_bytes, sm_count, stream);
}

}  // namespace moetune::ops::cuda
