// The load-balancing (aux) loss on the GPU, over all MoE layers (the CPU reference is ops/router.h
// load_balancing_loss): loss = E · Σ_e (C_e / N) · (P_e / N), with C_e the top-k counts and P_e the softmax
// probability sums of every layer, N the counted rows over all layers. Padding tokens (token_valid == 0) count
// in neither. All tensors live on the GPU; nothing is read back to the host.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// One layer's forward: counts F32 [E] and prob_sums F32 [E] (zeroed once per step by the caller) += this
// layer's C_e and P_e. logits F32 [T, E], expert_ids I32 [T, k], token_valid U8 [T] or undefined (all valid).
void aux_loss_accumulate(const Tensor& logits, const Tensor& expert_ids, const Tensor& token_valid,
                         const Tensor& counts, const Tensor& prob_sums);

// loss F32 [1] = E · Σ_e counts[e] · prob_sums[e] / rows², rows = N (a host value: valid tokens × layers); 0 when
// rows is 0, as the CPU reference returns.
void aux_loss_value(const Tensor& counts, const Tensor& prob_sums, double rows, const Tensor& loss);

// One layer's backward: dlogits F32 [T, E] += scale · d(loss)/d(logits), the counts being constants.
void aux_loss_backward(const Tensor& logits, const Tensor& token_valid, const Tensor& counts, double rows,
                       double scale, const Tensor& dlogits);

}  // namespace moetune::ops::cuda
