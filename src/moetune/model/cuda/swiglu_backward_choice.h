// Where SwiGLU's backward runs (the routed experts', model/cuda/moe_block.cpp; the dense MLPs' and shared experts',
// model/cuda/swiglu_mlp.cpp): in its own pass after the down projection's input gradient (the default), or in that
// GEMM's epilogue (ops::cuda::grouped_matmul_swiglu_backward:
// the same bits without d(activated)'s round trip through memory). The process starts with
// MOETUNE_SWIGLU_BACKWARD's choice, kernel | epilogue (unset: kernel; another value fails the first SwiGLU backward
// with a message naming it), for alternating the two in whole runs until the epilogue is measured in a step.
#pragma once

namespace moetune::model::cuda {

bool swiglu_backward_in_epilogue();
void set_swiglu_backward_in_epilogue(bool in_epilogue);  // for tests

}  // namespace moetune::model::cuda
