// DeepSeek-V3's router (DeepseekV3TopkRouter in transformers 5.17): sigmoid scores; a per-expert correction
// bias added for the choice only; the experts split into groups, groups ranked by the sum of their two best
// biased scores, the best `topk_groups` groups kept, then top-k over the kept experts; combine weights from
// the unbiased scores, renormalised over the chosen (sum + 1e-20) when asked, times `scaling_factor`.
// The choice is a constant for the backward pass; the weights differentiate through the sigmoid.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/router.h"

namespace moetune::ops {

struct GroupLimitedRouter {
  int64_t top_k = 1, num_groups = 1, topk_groups = 1;
  bool renormalize = false;      // norm_topk_prob
  double scaling_factor = 1.0;   // routed_scaling_factor
};

// logits [T, E] (x · W_routerᵀ); correction_bias [E] or undefined (zeros). Choices most-preferred first;
// ties go to the lower index.
Routing sigmoid_router_forward(const Tensor& logits, const Tensor& correction_bias, const GroupLimitedRouter& router);

// The routing sigmoid_router_forward gives when it makes these choices (chosen [T * k], each token's k experts):
// the same combine weights, from the unbiased scores. Tests force one engine's choices on another this way, so
// that a choice flipped at a near-tie by rounding does not hide or fake a difference.
Routing sigmoid_router_weigh(const Tensor& logits, const std::vector<int32_t>& chosen, const GroupLimitedRouter& router);

// Given d(weight) [T * k]: d(logits) [T, E] (non-zero only at the chosen experts).
Tensor sigmoid_router_backward(const Routing& routing, const std::vector<float>& dweight, const GroupLimitedRouter& router);

}  // namespace moetune::ops
