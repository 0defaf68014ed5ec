// DeepSeek-V3's sigmoid group-limited router on the GPU (the CPU reference is ops/sigmoid_router.h): sigmoid
// scores, the correction bias added for the choice only, groups ranked by the sum of their two best biased
// scores, the best `topk_groups` groups kept, top-k over their experts; combine weights from the unbiased scores
// (renormalised over the k when asked) times the scaling factor. Every call is queued on gpu::stream().
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/sigmoid_router.h"

namespace moetune::ops::cuda {

// logits F32 [T, E] (E ≤ 512, E / num_groups ≥ 2, num_groups ≤ 32, k ≤ 16); correction_bias F32 [E] or undefined
// -> expert_ids I32 [T, k] (most preferred first, ties to the lower index) and weights F32 [T, k].
void sigmoid_router_forward(const Tensor& logits, const Tensor& correction_bias, const GroupLimitedRouter& router,
                            const Tensor& expert_ids, const Tensor& weights);

// Given dweights F32 [T, k]: overwrites dlogits F32 [T, E] (zero off the chosen experts); the choice is a
// constant, the weights differentiate through the sigmoid (recomputed from logits).
void sigmoid_router_backward(const Tensor& logits, const Tensor& expert_ids, const Tensor& dweights,
                             const GroupLimitedRouter& router, const Tensor& dlogits);

}  // namespace moetune::ops::cuda
