#include "moetune/model/families/nemotron_h_config.h"

#include <fmt/format.h>

#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"

namespace moetune::model {
namespace {

// The first key present among `keys` (NemotronHConfig pops its mamba_* aliases over the plain names).
const char* spelled(const io::ConfigReader& r, std::initializer_list<const char*> keys) {
  for (const char* key : keys)
    if (r.has(key)) return key;
  return *keys.begin();
}

NemotronHLayer layer_named(const std::string& name, const char* key) {
  // remap_legacy_layer_types: "mamba" and "attention" are the older names.
  if (name == "linear_attention" || name == "mamba") return NemotronHLayer::Mamba2;
  if (name == "full_attention" || name == "attention") return NemotronHLayer::Attention;
  if (name == "mlp") return NemotronHLayer::Mlp;
  if (name == "moe") return NemotronHLayer::Moe;
  fail("config.json: '{}' has the layer type '{}'; Nemotron-H layers are linear_attention (or mamba), "
       "full_attention (or attention), mlp and moe",
       key, name);
}

NemotronHLayer layer_from_pattern(char symbol) {
  switch (symbol) {
    case 'M': return NemotronHLayer::Mamba2;
    case '*': return NemotronHLayer::Attention;
    case '-': return NemotronHLayer::Mlp;
    case 'E': return NemotronHLayer::Moe;
    default:
      fail("config.json: 'hybrid_override_pattern' has '{}'; its letters are M (Mamba2), * (attention), - (MLP) "
           "and E (MoE)",
           std::string(1, symbol));
  }
}

// transformers: layer_types wins (it is applied last, over its alias layers_block_type); else layers_block_type;
// else hybrid_override_pattern; else its default pattern of four layers. num_hidden_layers is ignored when it
// disagrees (transformers only warns).
std::vector<NemotronHLayer> read_layers(const io::ConfigReader& r) {
  std::vector<NemotronHLayer> layers;
  for (const char* key : {"layer_types", "layers_block_type"}) {
    if (!r.has(key)) continue;
    for (const std::string& name : r.strings(key)) layers.push_back(layer_named(name, key));
    return layers;
  }
  if (r.has("hybrid_override_pattern")) {
    for (char symbol : r.string("hybrid_override_pattern", "")) layers.push_back(layer_from_pattern(symbol));
    return layers;
  }
  return {NemotronHLayer::Mamba2, NemotronHLayer::Moe, NemotronHLayer::Attention, NemotronHLayer::Mlp};
}

Mamba2Spec read_mamba(const io::ConfigReader& r, double norm_eps) {
  Mamba2Spec m;
  m.num_heads = r.integer("mamba_num_heads", 128);
  m.head_dim = r.integer("mamba_head_dim", 64);
  m.num_groups = r.integer(spelled(r, {"mamba_n_groups", "n_groups"}), 8);
  m.state_size = r.integer("ssm_state_size", 128);
  m.conv_kernel = r.integer(spelled(r, {"mamba_d_conv", "conv_kernel"}), 4);
  m.conv_bias = r.boolean(spelled(r, {"mamba_conv_bias", "use_conv_bias"}), true);
  m.proj_bias = r.boolean("use_bias", false);
  // NemotronHMamba2Mixer clamps dt to (time_step_min, inf); time_step_limit is read by nothing that trains.
  m.dt_min = r.number(spelled(r, {"mamba_dt_min", "time_step_min"}), 0.001);
  m.dt_max = INFINITY;
  m.norm_eps = norm_eps;
  if (r.string("mamba_hidden_act", "silu") != "silu")
    refuse("mamba_hidden_act", r.string("mamba_hidden_act", ""), "a Mamba2 conv activation other than silu");
  if (m.num_groups <= 0 || m.num_heads % m.num_groups != 0)
    fail("config.json: mamba_num_heads {} is not a multiple of n_groups {}", m.num_heads, m.num_groups);
  return m;
}

void check_positive(std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  for (const auto& [key, value] : sizes)
    if (value <= 0) fail("config.json: '{}' must be positive, got {}", key, value);
}

}  // namespace

NemotronHConfig read_nemotron_h_config(const io::ConfigReader& r) {
  NemotronHConfig c;
  c.vocab_size = r.integer("vocab_size", 131072);
  c.hidden_size = r.integer("hidden_size", 4096);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.norm_eps = r.number("layer_norm_epsilon", 1e-5);
  c.layers = read_layers(r);
  c.mamba = read_mamba(r, c.norm_eps);
  c.chunk_size = r.integer(spelled(r, {"mamba_chunk_size", "chunk_size"}), 128);
  c.num_heads = r.integer("num_attention_heads", 32);
  // An explicit null means as many as the query heads (NemotronHConfig.__post_init__).
  c.num_kv_heads = r.is_null("num_key_value_heads") ? c.num_heads : r.integer("num_key_value_heads", 8);
  c.head_dim = r.integer("head_dim", 128);
  c.intermediate_size = r.integer("intermediate_size", 21504);
  c.mlp_bias = r.boolean("mlp_bias", false);
  // num_local_experts wins when both are given (NemotronHConfig sets it after n_routed_experts).
  c.num_experts = r.integer(spelled(r, {"num_local_experts", "n_routed_experts"}), 8);
  c.top_k = r.integer("num_experts_per_tok", 2);
  c.moe_intermediate_size = r.integer("moe_intermediate_size", 7688);
  c.shared_intermediate_size = r.integer("moe_shared_expert_intermediate_size", 7688);
  c.num_groups = r.integer("n_group", 1);
  c.topk_groups = r.integer("topk_group", 1);
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = r.number("routed_scaling_factor", 1.0);
  c.moe_latent_size = r.optional_integer("moe_latent_size");
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", 0);
  // NemotronHAttention applies attention_dropout in training mode: random masks no step can reproduce.
  if (double p = r.number("attention_dropout", 0.0); p != 0.0)
    refuse("attention_dropout", fmt::format("{}", p), "attention dropout");
  if (r.string("mlp_hidden_act", "relu2") != "relu2")
    refuse("mlp_hidden_act", r.string("mlp_hidden_act", ""), "a Nemotron-H MLP activation other than relu2");
  if (c.layers.empty()) fail("config.json: the Nemotron-H layer pattern is empty (layers_block_type / hybrid_override_pattern)");
  check_positive({{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size}, {"num_attention_heads", c.num_heads},
                  {"head_dim", c.head_dim}, {"ssm_state_size", c.mamba.state_size}, {"mamba_head_dim", c.mamba.head_dim},
                  {"conv_kernel", c.mamba.conv_kernel}});
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
    fail("config.json: num_attention_heads {} is not a multiple of num_key_value_heads {}", c.num_heads, c.num_kv_heads);
  if (c.num_groups <= 0 || c.num_experts % c.num_groups != 0 || c.topk_groups > c.num_groups)
    fail("config.json: n_routed_experts {} do not split into n_group {} groups with topk_group {} of them kept",
         c.num_experts, c.num_groups, c.topk_groups);
  if (c.top_k <= 0 || c.top_k > c.num_experts)
    fail("config.json: num_experts_per_tok {} must be between 1 and n_routed_experts {}", c.top_k, c.num_experts);
  return c;
}

std::vector<NemotronHTensor> nemotron_h_tensors(const NemotronHConfig& c) {
  const int64_t h = c.hidden_size;
  std::vector<NemotronHTensor> out{{"backbone.embeddings.weight", {c.vocab_size, h}}};
  auto add = [&](const std::string& name, Shape shape, bool buffer = false) { out.push_back({name, std::move(shape), buffer}); };
  // A relu² MLP (the MLP layers and the shared expert): up_proj, down_proj, biases with mlp_bias.
  auto mlp = [&](const std::string& prefix, int64_t width) {
    add(prefix + "up_proj.weight", {width, h});
    if (c.mlp_bias) add(prefix + "up_proj.bias", {width});
    add(prefix + "down_proj.weight", {h, width});
    if (c.mlp_bias) add(prefix + "down_proj.bias", {h});
  };
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const std::string layer = fmt::format("backbone.layers.{}.", l), mixer = layer + "mixer.";
    add(layer + "norm.weight", {h});
    switch (c.layers[l]) {
      case NemotronHLayer::Mamba2: {
        const Mamba2Spec& m = c.mamba;
        add(mixer + "dt_bias", {m.num_heads});
        add(mixer + "A_log", {m.num_heads});
        add(mixer + "D", {m.num_heads});
        add(mixer + "conv1d.weight", {m.conv_channels(), 1, m.conv_kernel});
        if (m.conv_bias) add(mixer + "conv1d.bias", {m.conv_channels()});
        add(mixer + "in_proj.weight", {m.projection(), h});
        if (m.proj_bias) add(mixer + "in_proj.bias", {m.projection()});
        add(mixer + "norm.weight", {m.inner()});
        add(mixer + "out_proj.weight", {h, m.inner()});
        if (m.proj_bias) add(mixer + "out_proj.bias", {h});
        break;
      }
      case NemotronHLayer::Attention:
        add(mixer + "q_proj.weight", {c.num_heads * c.head_dim, h});
        add(mixer + "k_proj.weight", {c.num_kv_heads * c.head_dim, h});
        add(mixer + "v_proj.weight", {c.num_kv_heads * c.head_dim, h});
        add(mixer + "o_proj.weight", {h, c.num_heads * c.head_dim});
        break;
      case NemotronHLayer::Mlp: mlp(mixer, c.intermediate_size); break;
      case NemotronHLayer::Moe: {
        const int64_t in = c.moe_latent_size.value_or(h);
        for (int64_t e = 0; e < c.num_experts; ++e) {
          add(fmt::format("{}experts.{}.up_proj.weight", mixer, e), {c.moe_intermediate_size, in});
          add(fmt::format("{}experts.{}.down_proj.weight", mixer, e), {in, c.moe_intermediate_size});
        }
        add(mixer + "gate.weight", {c.num_experts, h});
        add(mixer + "gate.e_score_correction_bias", {c.num_experts}, true);
        mlp(mixer + "shared_experts.", c.shared_intermediate_size);
        if (c.moe_latent_size) {
          add(mixer + "fc1_latent_proj.weight", {*c.moe_latent_size, h});
          if (c.mlp_bias) add(mixer + "fc1_latent_proj.bias", {*c.moe_latent_size});
          add(mixer + "fc2_latent_proj.weight", {h, *c.moe_latent_size});
          if (c.mlp_bias) add(mixer + "fc2_latent_proj.bias", {h});
        }
        break;
      }
    }
  }
  add("backbone.norm_f.weight", {h});
  // NemotronHForCausalLM declares no tied weights (_tied_weights_keys = {}): lm_head stays its own tensor even
  // with tie_word_embeddings true, and save_pretrained writes it.
  add("lm_head.weight", {c.vocab_size, h});
  return out;
}

int64_t nemotron_h_parameter_count(const NemotronHConfig& c) {
  int64_t total = 0;
  for (const NemotronHTensor& t : nemotron_h_tensors(c))
    if (!t.buffer) total += shape_numel(t.shape);
  return total;
}

}  // namespace moetune::model
