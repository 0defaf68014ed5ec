// A per-token sigmoid gate on a branch added to a base: out[t] = base[t] + sigmoid(logit[t]) · y[t] (Qwen2-MoE's
// shared expert, scaled by sigmoid(shared_expert_gate(x))). The GPU twin is ops/cuda/gate.h. And the elementwise
// gate out = y ⊙ sigmoid(logits) (Qwen3-Next's gated attention output; CPU only).
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

// base, y [T, H]; logits [T, 1] (or [T]).
Tensor sigmoid_gated_add(const Tensor& base, const Tensor& y, const Tensor& logits);

struct SigmoidGateGrads {
  Tensor dy;       // [T, H] = sigmoid(logit) · dout
  Tensor dlogits;  // [T, 1] = sigmoid' · ⟨dout, y⟩
};
// The gradient that reaches base is dout itself.
SigmoidGateGrads sigmoid_gated_add_backward(const Tensor& dout, const Tensor& y, const Tensor& logits);

// y, logits: the same shape.
Tensor sigmoid_gated(const Tensor& y, const Tensor& logits);
// dy = sigmoid(logits) ⊙ dout, dlogits = sigmoid' ⊙ y ⊙ dout (each the shape of y).
SigmoidGateGrads sigmoid_gated_backward(const Tensor& dout, const Tensor& y, const Tensor& logits);

}  // namespace moetune::ops
