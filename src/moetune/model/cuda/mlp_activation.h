// The activation between an MLP's two projections on the GPU, as its MlpSpec names it: SwiGLU or GPT-OSS's
// clamped SwiGLU on a fused [gate | up] pre-activation [R, 2I], or Nemotron-H's ungated relu² on up alone [R, I].
// The dense MLP, the shared expert and the routed experts all go through here, so an activation is added once.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/model/model_spec.h"

namespace moetune::model::cuda {

// The activation's output width I from the pre-activation's (2I gated, I for relu²).
int64_t activated_width(const MlpSpec& mlp, int64_t pre_activation_width);
// pre [R, first_projection] -> out [R, I], BF16.
void activation_forward(const MlpSpec& mlp, const Tensor& pre, const Tensor& out);
// dout [R, I] and the forward's pre -> dpre shaped like pre (overlapping neither). recomputed, when defined: the
// forward's output [R, I] too (the down projection's weight gradient reads it), in the same pass for the gated
// activations; it may be dout itself, which is then overwritten.
void activation_backward(const MlpSpec& mlp, const Tensor& dout, const Tensor& pre, const Tensor& dpre,
                         const Tensor& recomputed = {});

}  // namespace moetune::model::cuda
