// A per-token sigmoid gate on a branch added to a base, on the GPU (the CPU reference is ops/gate.h):
// out[t] = base[t] + sigmoid(logit[t]) · y[t]. Qwen2-MoE scales its shared expert this way. And the elementwise gate
// out = y ⊙ sigmoid(logits) (Qwen3-Next's gated attention output, its logits a block of the qkv projection).
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"

namespace moetune::ops::cuda {

// base, y, out BF16 [T, H]; logits F32 [T, 1]. out may be base itself.
void sigmoid_gated_add(const Tensor& base, const Tensor& y, const Tensor& logits, const Tensor& out);

// dy = sigmoid(logit) · dout (BF16 [T, H]); dlogits F32 [T, 1] = sigmoid'(logit) · ⟨dout, y⟩ (f32 sums).
void sigmoid_gated_add_backward(const Tensor& dout, const Tensor& y, const Tensor& logits, const Tensor& dy,
                                const Tensor& dlogits);

// out = y ⊙ sigmoid(logits): y and out BF16 [T, W], logits a BF16 block of W columns (inside a wider tensor).
void sigmoid_gated(const Tensor& y, const ColumnBlock& logits, const Tensor& out);

// dy = sigmoid(logits) ⊙ dout (dy may be dout itself), dlogits = sigmoid' ⊙ y ⊙ dout written into its block.
void sigmoid_gated_backward(const Tensor& dout, const Tensor& y, const ColumnBlock& logits, const Tensor& dy,
                            const ColumnBlock& dlogits);

}  // namespace moetune::ops::cuda
