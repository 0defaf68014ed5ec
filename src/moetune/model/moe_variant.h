// What a MoE spec selects on the CPU beyond the Qwen3-MoE defaults: the router's form (softmax then top-k,
// GPT-OSS's top-k then softmax, or DeepSeek-V3's sigmoid group-limited router with its correction bias) and the
// experts' biases and activation. The MoE block calls these instead of the ops directly, so a new variant changes
// this file and not the block.
#pragma once

#include <vector>

#include "moetune/model/block_params.h"
#include "moetune/model/model_spec.h"
#include "moetune/ops/experts.h"
#include "moetune/ops/router.h"
#include "moetune/ops/sigmoid_router.h"

namespace moetune::model {

// DeepSeek-V3's router: sigmoid scores, optional correction bias, groups, scaling.
bool is_sigmoid_group_limited(const RouterSpec& router);
// Its settings as both devices' ops take them.
ops::GroupLimitedRouter group_limited(const RouterSpec& router);
// The softmax router's group limit and weight factor (DeepSeek-V2), as both devices' ops take them.
ops::SoftmaxTopkOptions softmax_topk_options(const RouterSpec& router);
// Whether the CPU MoE block runs this router at all.
bool cpu_runs_router(const RouterSpec& router);

// logits [T, E]; correction_bias [E] (DeepSeek-V3's e_score_correction_bias) or undefined.
ops::Routing route(const RouterSpec& router, const Tensor& logits, const Tensor& correction_bias = Tensor());
// route() with each token's k experts given (chosen [T·k]) instead of chosen here: the weights route() would give
// them, for every router the CPU runs (cpu_runs_router); for tests that force one engine's choices on another.
ops::Routing route_chosen(const RouterSpec& router, const Tensor& logits, const std::vector<int32_t>& chosen);
// d(logits) [T, E] from d(routing weights) [T·k].
Tensor route_backward(const RouterSpec& router, const ops::Routing& routing, const std::vector<float>& dweight);

ops::ExpertVariant expert_variant(const MlpSpec& experts, const MoeParams& p);
ops::ExpertBiasGrads expert_bias_grads(const MoeParams& p);

}  // namespace moetune::model
