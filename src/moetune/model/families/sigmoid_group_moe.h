// The MoE layer DeepSeek-V3 brought and GLM-4-MoE reuses, as their configs spell it: a sigmoid router with an
// fp32 e_score_correction_bias for the choice (a buffer, never trained), group-limited top-k (n_group,
// topk_group), weights renormalised when norm_topk_prob and scaled by routed_scaling_factor; n_shared_experts
// shared experts of moe_intermediate_size each, added unscaled; the first first_k_dense_replace layers dense. The
// correction bias's buffer is decoder_parameters.h's (the router spec asks for it).
#pragma once

#include <vector>

#include "moetune/io/config_reader.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_layout.h"

namespace moetune::model {

// The config classes' defaults, which differ between the families.
struct SigmoidGroupMoeDefaults {
  int64_t routed_experts = 256, groups = 8, topk_groups = 4, top_k = 8, moe_intermediate_size = 2048;
  int64_t shared_experts = 1;
  double routed_scaling_factor = 2.5;
  bool norm_topk_prob = true;
};

MoeSpec read_sigmoid_group_moe(const io::ConfigReader& config, const SigmoidGroupMoeDefaults& defaults);

// The group-limited top-k's settings, as the routers that take them need: n_group dividing the experts into groups of
// at least `min_group_size` (DeepSeek-V3's rank by their top-2), topk_group in [1, n_group], top-k within them.
void check_expert_groups(const RouterSpec& router, int64_t min_group_size);

// Which layers are MoE: mlp_layer_types, one entry a layer ("sparse": MoE, "dense": the MLP; entries past the last
// layer unread, as transformers leaves them); absent (or null), the first `dense_when_absent` dense.
std::vector<bool> sparse_layers_of(const io::ConfigReader& config, int64_t layers, int64_t dense_when_absent);

// n_shared_experts (absent: `default_count`) shared experts of `expert_intermediate` each, as one MLP added
// unscaled; none is refused (DeepSeek's MoE modules always build them).
SharedExpertSpec read_shared_experts(const io::ConfigReader& config, int64_t expert_intermediate,
                                     int64_t default_count);

// The decoder's tensors as these families name them (the shared experts under `mlp.shared_experts`).
std::vector<ParameterSpec> shared_experts_decoder_parameters(const ModelSpec& spec);

// The decoder's layers: the first first_k_dense_replace (absent: `dense_default`) attention + a dense MLP of
// intermediate_size, the rest attention + `moe`.
void place_dense_then_moe_layers(const io::ConfigReader& config, int64_t dense_default, const AttentionSpec& attention,
                                 const MoeSpec& moe, int64_t intermediate_size, ModelSpec& spec);

// The same with the MoE layers named one by one (moe_layers[layer]; GLM-4-MoE-Lite's mlp_layer_types).
void place_dense_and_moe_layers(const std::vector<bool>& moe_layers, const AttentionSpec& attention, const MoeSpec& moe,
                                int64_t intermediate_size, ModelSpec& spec);

}  // namespace moetune::model
