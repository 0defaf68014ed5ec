// The experts' weight gradients (grouped_gemm_weight_grad.cuh): the tile configuration every N, K uses.
#include "moetune/ops/cuda/grouped_gemm_weight_grad.cuh"

namespace moetune::ops::cuda {
namespace {

using Config = grouped_gemm_detail::WeightGradConfig<cute::Shape<cute::_128, cute::_256, cute::_64>,
                                                     cute::Shape<cute::_2, cute::_1, cute::_1>,
                                                     grouped_gemm_detail::Cooperative>;

}  // namespace

template <>
size_t grouped_gemm_scratch_bytes<GroupedGemmKind::WeightGrad>(int groups, int sm_count) {
  return grouped_gemm_detail::scratch_bytes<Config>(groups, sm_count);
}

template <>
std::string launch_grouped_gemm<GroupedGemmKind::WeightGrad>(const GroupedGemmProblem& problem, void* scratch,
                                                             size_t scratch_bytes, int sm_count, cudaStream_t stream) {
  return grouped_gemm_detail::run_weight_grad<Config>(problem, scratch, scratch_bytes, sm_count, stream);
}

}  // namespace moetune::ops::cuda
