// What a MoE spec selects on the CPU beyond the Qwen3-MoE defaults: the router's form (softmax then top-k, or
// GPT-OSS's top-k then softmax) and the experts' biases and activation. The MoE block calls these instead of
// the ops directly, so a new variant changes this file and not the block.
#pragma once

#include <vector>

#include "moetune/model/block_params.h"
#include "moetune/model/model_spec.h"
#include "moetune/ops/experts.h"
#include "moetune/ops/router.h"

namespace moetune::model {

ops::Routing route(const RouterSpec& router, const Tensor& logits);
// d(logits) [T, E] from d(routing weights) [T·k].
Tensor route_backward(const RouterSpec& router, const ops::Routing& routing, const std::vector<float>& dweight);

ops::ExpertVariant expert_variant(const MlpSpec& experts, const MoeParams& p);
ops::ExpertBiasGrads expert_bias_grads(const MoeParams& p);

}  // namespace moetune::model
