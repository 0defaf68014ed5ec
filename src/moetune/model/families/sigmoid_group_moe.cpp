#include "moetune/model/families/sigmoid_group_moe.h"

#include <algorithm>

#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"

namespace moetune::model {

MoeSpec read_sigmoid_group_moe(const io::ConfigReader& r, const SigmoidGroupMoeDefaults& d) {
  MoeSpec moe;
  RouterSpec& router = moe.router;
  // v5 maps num_local_experts onto n_routed_experts (attribute_map), set after the field: it wins when both are
  // written. Released configs write n_routed_experts.
  router.num_experts = r.integer("num_local_experts", r.integer("n_routed_experts", d.routed_experts));
  router.top_k = r.integer("num_experts_per_tok", d.top_k);
  router.score = RouterScore::Sigmoid;
  router.num_groups = r.integer("n_group", d.groups);
  router.topk_groups = r.integer("topk_group", d.topk_groups);
  router.correction_bias = true;
  router.renormalize = r.truthy("norm_topk_prob", d.norm_topk_prob);  // `bool | None`: null does not renormalise
  router.scaling_factor = r.number("routed_scaling_factor", d.routed_scaling_factor);
  check_expert_groups(router, /*min_group_size=*/2);  // groups rank by their top-2
  moe.experts.intermediate = r.integer("moe_intermediate_size", d.moe_intermediate_size);
  moe.shared_expert = read_shared_experts(r, moe.experts.intermediate, d.shared_experts);
  return moe;
}

void check_expert_groups(const RouterSpec& router, int64_t min_group_size) {
  if (router.num_groups <= 0 || router.num_experts % router.num_groups != 0 ||
      router.num_experts / router.num_groups < min_group_size)
    fail("'n_group' ({}) must divide the {} routed experts into groups of at least {}", router.num_groups,
         router.num_experts, min_group_size);
  if (router.topk_groups <= 0 || router.topk_groups > router.num_groups)
    fail("'topk_group' ({}) must be between 1 and 'n_group' ({})", router.topk_groups, router.num_groups);
  if (router.top_k > router.topk_groups * (router.num_experts / router.num_groups))
    fail("'num_experts_per_tok' ({}) exceeds the experts in 'topk_group' ({}) groups", router.top_k,
         router.topk_groups);
}

std::vector<bool> sparse_layers_of(const io::ConfigReader& r, int64_t layers, int64_t dense_when_absent) {
  std::vector<bool> sparse(size_t(layers), true);
  const nlohmann::json* types = r.find("mlp_layer_types");
  if (!types) {
    for (int64_t layer = 0; layer < std::min(layers, dense_when_absent); ++layer) sparse[size_t(layer)] = false;
    return sparse;
  }
  if (!types->is_array() || int64_t(types->size()) < layers)
    fail("'mlp_layer_types' must list \"dense\" or \"sparse\" for each of the {} layers, got {}", layers,
         types->dump().substr(0, 200));
  for (int64_t layer = 0; layer < layers; ++layer) {
    const nlohmann::json& type = (*types)[size_t(layer)];
    if (type != "dense" && type != "sparse")
      fail("'mlp_layer_types'[{}] is {}: expected \"dense\" or \"sparse\"", layer, type.dump().substr(0, 100));
    sparse[size_t(layer)] = type == "sparse";
  }
  return sparse;
}

SharedExpertSpec read_shared_experts(const io::ConfigReader& r, int64_t expert_intermediate, int64_t default_count) {
  const int64_t shared = r.integer("n_shared_experts", default_count);
  if (shared <= 0) refuse("n_shared_experts", std::to_string(shared), "MoE layers without shared experts");
  return SharedExpertSpec{MlpSpec{expert_intermediate * shared}, /*sigmoid_gate=*/false};
}

std::vector<ParameterSpec> shared_experts_decoder_parameters(const ModelSpec& spec) {
  MoeTensorNames names;
  names.shared_expert = "shared_experts";
  return decoder_parameters(spec, names);
}

void place_dense_then_moe_layers(const io::ConfigReader& r, int64_t dense_default, const AttentionSpec& attention,
                                 const MoeSpec& moe, int64_t intermediate_size, ModelSpec& spec) {
  const int64_t dense = r.integer("first_k_dense_replace", dense_default);
  if (dense < 0) fail("'first_k_dense_replace' must not be negative, got {}", dense);
  std::vector<bool> moe_layers(size_t(spec.num_layers()));
  for (int64_t layer = 0; layer < spec.num_layers(); ++layer) moe_layers[size_t(layer)] = layer >= dense;
  place_dense_and_moe_layers(moe_layers, attention, moe, intermediate_size, spec);
}

void place_dense_and_moe_layers(const std::vector<bool>& moe_layers, const AttentionSpec& attention, const MoeSpec& moe,
                                int64_t intermediate_size, ModelSpec& spec) {
  for (int64_t layer = 0; layer < spec.num_layers(); ++layer)
    spec.layers[size_t(layer)] = moe_layers[size_t(layer)] ? attention_then(attention, moe)
                                                           : attention_then(attention, MlpSpec{intermediate_size});
}

}  // namespace moetune::model
