// Exaone4ForCausalLM (LG's EXAONE 4.0): OLMo-2's layers (norms on the sublayers' outputs before the residual add,
// none on their inputs; a SwiGLU MLP without biases) with Qwen3's per-head q/k RMSNorm before RoPE and no
// attention biases. Sliding windows where layer_types puts them, else every layer but each
// sliding_window_pattern-th (4 by default); with a sliding_window set, only the sliding layers rotate q and k (the
// full-attention layers attend without positions), without one every layer does. Defaults: transformers 5.17's
// Exaone4Config (bos 0, eos 2, sliding_window 4096). Its __post_init__ cannot derive layer types without a window
// (it divides by 0) or from a string pattern ("LLLG": it takes the pattern's % as an int): refused here.
#include <cstdlib>
#include <string>

#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/sigmoid_group_moe.h"

namespace moetune::model {
namespace {

// layer_types as written, else Exaone4Config's: a layer slides unless (layer + 1) is a multiple of the pattern.
std::vector<std::string> layer_types(const io::ConfigReader& r, int64_t layers, bool windowed) {
  std::vector<std::string> types = r.strings("layer_types");
  if (!types.empty()) return types;
  const nlohmann::json* pattern = r.find("sliding_window_pattern");
  if (!windowed)
    fail(
        "config.json has neither 'layer_types' nor a 'sliding_window': Exaone4Config cannot derive the layer types "
        "then (it divides by a pattern of 0)");
  if (pattern && !pattern->is_number_integer())
    fail(
        "'sliding_window_pattern' is {} without 'layer_types': Exaone4Config derives the layer types from an "
        "integer pattern only",
        pattern->dump().substr(0, 100));
  const int64_t every = std::abs(r.integer("sliding_window_pattern", 4));  // Python's % by a negative: the same zeros
  if (every == 0) fail("'sliding_window_pattern' must not be 0 (Exaone4Config divides by it)");
  for (int64_t i = 0; i < layers; ++i) types.push_back((i + 1) % every != 0 ? "sliding_attention" : "full_attention");
  return types;
}

// Each layer's attention as Exaone4Attention runs it: per-head q/k norms, no biases, the layer's window, and no RoPE
// on the full-attention layers where a window is set.
std::vector<AttentionSpec> exaone4_attention(const io::ConfigReader& r, const DecoderConfig& c) {
  const std::optional<int64_t> window = every_layer_window(r, 4096);  // absent: 4096; null: none
  const std::vector<std::optional<int64_t>> windows = windows_of_layer_types(
      layer_types(r, c.spec.num_layers(), window.has_value()), window, c.spec.num_layers(), sliding_window_key(r));
  std::vector<AttentionSpec> layers;
  for (const std::optional<int64_t>& layer_window : windows) {
    AttentionSpec& attention = layers.emplace_back(c.attention);
    attention.qk_norm = true;
    attention.sliding_window = layer_window;
    if (window && !layer_window) attention.rope = ops::RopeSpec{.type = "none"};  // Exaone4Attention's global layers
  }
  return layers;
}

// Exaone4Config's and ExaoneMoeConfig's shared defaults.
const DecoderDefaults kExaoneDefaults{.vocab_size = 102400,
                                      .hidden_size = 4096,
                                      .intermediate_size = 16384,
                                      .num_hidden_layers = 32,
                                      .num_attention_heads = 32,
                                      .num_key_value_heads = 32,
                                      .max_position_embeddings = 2048,
                                      .rms_norm_eps = 1e-5,
                                      .has_layer_types = true};

ModelSpec describe_exaone4(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, kExaoneDefaults);
  apply_token_id_defaults(r, {.pad = std::nullopt, .bos = 0, .eos = 2}, c.spec);
  const std::vector<AttentionSpec> attention = exaone4_attention(r, c);
  for (size_t i = 0; i < c.spec.layers.size(); ++i)
    c.spec.layers[i] = attention_then_output_normed(attention[i], MlpSpec{c.intermediate_size});
  finish_decoder(c);
  return c.spec;
}

// ExaoneMoeForCausalLM (K-EXAONE): EXAONE 4.0's attention in pre-norm layers (input_layernorm, then
// post_attention_layernorm before the MLP, as OLMoE's layers), the MLP dense or DeepSeek-V3's MoE layer where
// mlp_layer_types says (absent: the first first_k_dense_replace dense), its experts counted by num_experts and
// num_shared_experts. mtp.* tensors are skipped. Defaults: transformers 5.17's ExaoneMoeConfig (bos 1, eos 53,
// pad 0; 64 experts, top-8, one shared, scaling 2.5, renormalised).
ModelSpec describe_exaone_moe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, kExaoneDefaults);
  apply_token_id_defaults(r, {.pad = 0, .bos = 1, .eos = 53}, c.spec);
  const std::vector<AttentionSpec> attention = exaone4_attention(r, c);
  // DeepSeek-V3's MoE layer read under ExaoneMoeConfig's names for the expert counts.
  nlohmann::json renamed = r.object();
  for (const auto& [theirs, deepseek] : {std::pair<const char*, const char*>{"num_experts", "n_routed_experts"},
                                         {"num_shared_experts", "n_shared_experts"}}) {
    renamed.erase(deepseek);
    if (renamed.contains(theirs)) renamed[deepseek] = renamed[theirs];
  }
  renamed.erase("num_local_experts");
  const MoeSpec moe = read_sigmoid_group_moe(io::ConfigReader(renamed), {.routed_experts = 64,
                                                                         .groups = 1,
                                                                         .topk_groups = 1,
                                                                         .top_k = 8,
                                                                         .moe_intermediate_size = 1024,
                                                                         .shared_experts = 1,
                                                                         .routed_scaling_factor = 2.5});
  const std::vector<bool> sparse = sparse_layers_of(r, c.spec.num_layers(), r.integer("first_k_dense_replace", 1));
  for (size_t i = 0; i < c.spec.layers.size(); ++i)
    c.spec.layers[i] =
        attention_then(attention[i], sparse[i] ? decltype(SublayerSpec::mixer){moe} : MlpSpec{c.intermediate_size});
  c.spec.carries_mtp_layers = true;  // mtp.* (ExaoneMoePreTrainedModel ignores them on load)
  finish_decoder(c);
  return c.spec;
}

// transformers saves the correction bias on the MoE block (mlp.e_score_correction_bias), as the released files do.
std::vector<ParameterSpec> exaone_moe_parameters(const ModelSpec& spec) {
  MoeTensorNames names;
  names.shared_expert = "shared_experts";
  names.correction_bias = "e_score_correction_bias";
  return decoder_parameters(spec, names);
}

}  // namespace

extern const Family kExaone4Family{"Exaone4ForCausalLM", "exaone4", describe_exaone4, standard_decoder_parameters};
extern const Family kExaoneMoeFamily{"ExaoneMoeForCausalLM", "exaone_moe", describe_exaone_moe, exaone_moe_parameters};

}  // namespace moetune::model
