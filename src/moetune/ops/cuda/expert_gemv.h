// The experts of one token (generation's decode step) as matrix-vector products over the k chosen experts' rows,
// reading the expert ids and weights the router left on the device. At one token the grouped GEMM would run a
// 128-row tile for each chosen expert to fill one row, and the permute/combine around it would move k rows; here
// each warp reads one weight row once (the step is bound by reading the chosen experts' weights). The numerics
// follow the grouped path: the gate and up products and each expert's output are rounded to bf16 as the GEMMs
// write them, the activation and the weighted sum (with the residual) run in fp32.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// The experts' activation after their first projection: SwiGLU over its gate and up rows, or relu² over its
// one row (Nemotron-H's ungated experts).
enum class ExpertActivation { SwiGLU, ReluSquared };

// x BF16 [1, H]; up BF16 [E, 2I, H] for SwiGLU (gate rows first), [E, I, H] for relu²; expert_ids I32 [1, k] on
// the GPU -> activated BF16 [k, I], expert s's silu(gate) ⊙ up or relu(up)².
void expert_up_activation(const Tensor& x, const Tensor& up, const Tensor& expert_ids, const Tensor& activated,
                          ExpertActivation activation);

// activated BF16 [k, I]; down BF16 [E, H, I]; expert_ids I32 [1, k]; weights F32 [1, k]; residual BF16 [1, H] ->
// out BF16 [1, H] = residual + Σ_s weights[s] · down[e_s] · activated[s]. out may be the residual.
void expert_down_combine(const Tensor& activated, const Tensor& down, const Tensor& expert_ids, const Tensor& weights,
                         const Tensor& residual, const Tensor& out);

}  // namespace moetune::ops::cuda
