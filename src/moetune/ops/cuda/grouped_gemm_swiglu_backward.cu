// The down projection's input gradient with SwiGLU's backward in its epilogue (grouped_gemm_swiglu_backward.cuh):
// d(activated)[rows_e] = dy[rows_e] · W_e, W [E, H, I] as stored for the forward (an N-contiguous B operand,
// CUTLASS's RowMajor, as grouped_gemm_input_grad.cu), never stored; D is d(gate), the first I columns of
// d(gate_up)'s rows of 2I.
#include "moetune/ops/cuda/grouped_gemm_cutlass.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace grouped_gemm_detail;
// The input gradient's ping-pong 64x256x64 tiles with the SwiGLU tree: each consumer warpgroup's epilogue (its
// loads of gate and up included) runs beside the other's main loop.
using Config = GroupedGemmConfig<cutlass::layout::RowMajor, cutlass::layout::RowMajor,
                                 cute::Shape<cute::_64, cute::_256, cute::_64>,
                                 cute::Shape<cute::_2, cute::_1, cute::_1>, SwigluBackwardEpilogue>;

}  // namespace

size_t grouped_swiglu_backward_scratch_bytes(int groups, int sm_count) {
  return scratch_bytes<Config>(groups, sm_count);
}

std::string launch_grouped_swiglu_backward(const GroupedGemmProblem& problem, const SwigluBackwardOperands& operands,
                                           void* scratch, size_t scratch_bytes, int sm_count, cudaStream_t stream) {
  if (problem.accumulate || problem.alpha != 1.0f)
    return "the SwiGLU backward epilogue takes neither an accumulated product nor a scale";
  EpilogueExtras extras;
  extras.swiglu = {static_cast<const Element*>(operands.gate_up), static_cast<Element*>(problem.out),
                   static_cast<Element*>(operands.activated), problem.offsets, problem.n};
  return run_rows_times_weight<Config>(problem, /*weight_row=*/problem.n, scratch, scratch_bytes, sm_count, stream,
                                       extras, /*out_row=*/2 * int64_t(problem.n));
}

}  // namespace moetune::ops::cuda
