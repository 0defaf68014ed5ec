// The MoE layer DeepSeek-V3 brought and GLM-4-MoE reuses, as their configs spell it: a sigmoid router with an
// fp32 e_score_correction_bias for the choice (a buffer, never trained), group-limited top-k (n_group,
// topk_group), weights renormalised when norm_topk_prob and scaled by routed_scaling_factor; n_shared_experts
// shared experts of moe_intermediate_size each, added unscaled; the first first_k_dense_replace layers dense. The
// correction bias's buffer is decoder_parameters.h's (the router spec asks for it).
#pragma once

#include <vector>

#include "moetune/io/config_reader.h"
#include "moetune/model/model_spec.h"

namespace moetune::model {

// The config classes' defaults, which differ between the families.
struct SigmoidGroupMoeDefaults {
  int64_t routed_experts = 256, groups = 8, topk_groups = 4, top_k = 8, moe_intermediate_size = 2048;
  int64_t shared_experts = 1;
  double routed_scaling_factor = 2.5;
};

MoeSpec read_sigmoid_group_moe(const io::ConfigReader& config, const SigmoidGroupMoeDefaults& defaults);

// The decoder's layers: the first first_k_dense_replace (absent: `dense_default`) attention + a dense MLP of
// intermediate_size, the rest attention + `moe`.
void place_dense_then_moe_layers(const io::ConfigReader& config, int64_t dense_default, const AttentionSpec& attention,
                                 const MoeSpec& moe, int64_t intermediate_size, ModelSpec& spec);

// The same with the MoE layers named one by one (moe_layers[layer]; GLM-4-MoE-Lite's mlp_layer_types).
void place_dense_and_moe_layers(const std::vector<bool>& moe_layers, const AttentionSpec& attention, const MoeSpec& moe,
                                int64_t intermediate_size, ModelSpec& spec);

}  // namespace moetune::model
