// Phi3ForCausalLM (Phi-3, Phi-3.5-mini, Phi-4): Mistral's decoder with q, k and v in one projection
// (self_attn.qkv_proj: q's rows, then k's, then v's) and gate and up in one (mlp.gate_up_proj: gate's rows, then
// up's), which are the engine's own fused attn.qkv and gate_up parameters, one piece each; a sliding window on
// every layer when sliding_window is set (Phi3Model picks the sliding mask from it); RoPE default (over
// partial_rotary_factor of each head, as Phi3's default RoPE reads it) or longrope (v4's "su" and "yarn" spellings
// are longrope, as Phi3Config maps them; its other types it rejects). Dropouts other than 0 are refused (transformers
// would drop in training). Defaults: transformers 5.17's Phi3Config (pad_token_id 32000, whose embedding row learns
// nothing from lookups; bos 1, eos 32000).
#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

using nlohmann::json;

// config.json with Phi3Config's legacy RoPE types renamed: convert_rope_params_to_dict reads "su" and "yarn" as
// longrope (Phi-3's early releases wrote them), after standardize_rope_params has copied "type" to "rope_type".
json with_phi3_rope_type(const io::ConfigReader& r) {
  json config = r.object();
  const char* key = rope_dict_key(r);
  if (!config.contains(key) || !config[key].is_object()) return config;
  json& rope = config[key];
  const std::string type = io::ConfigReader(rope).string("rope_type", io::ConfigReader(rope).string("type", ""));
  if (type == "su" || type == "yarn") {
    rope.erase("type");
    rope["rope_type"] = "longrope";
  }
  return config;
}

ModelSpec describe(const io::ConfigReader& original) {
  const json config = with_phi3_rope_type(original);
  const io::ConfigReader r(config);
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 32064,
                                            .hidden_size = 3072,
                                            .intermediate_size = 8192,
                                            .num_hidden_layers = 32,
                                            .num_attention_heads = 32,
                                            .max_position_embeddings = 4096,
                                            .rms_norm_eps = 1e-5,
                                            .partial_rotary_factor = 1.0});
  const std::string& rope_type = c.attention.rope.type;
  if (rope_type != "default" && rope_type != "longrope")
    fail("'{}': Phi3Config accepts rope_type default or longrope (or the older su / yarn, read as longrope), got {}",
         rope_dict_key(r), rope_type.substr(0, 100));
  for (const char* key : {"resid_pdrop", "embd_pdrop"})
    if (const double p = r.number(key, 0.0); p != 0.0) refuse(key, fmt::format("{}", p), "dropout in training");
  apply_token_id_defaults(r, {.pad = 32000, .bos = 1, .eos = 32000}, c.spec);
  // Phi3Config's top-level original_max_position_embeddings (4096 unless given; null turns the reset off, where
  // transformers' comparison with None would fail).
  if (!r.is_null("original_max_position_embeddings"))
    c.spec.generation_cache_reset_length = r.integer("original_max_position_embeddings", 4096);
  build_dense_layers(c,
                     std::vector(c.spec.layers.size(), every_layer_window(r, /*Phi3Config's default*/ std::nullopt)));
  return c.spec;
}

std::vector<ParameterSpec> parameters(const ModelSpec& spec) {
  return decoder_parameters(spec, {}, {.qkv = "qkv_proj", .gate_up = "gate_up_proj"});
}

}  // namespace

extern const Family kPhi3Family{"Phi3ForCausalLM", "phi3", describe, parameters};

}  // namespace moetune::model
