// Olmo2ForCausalLM (OLMo-2) and Olmo3ForCausalLM (OLMo-3). OLMo-2: norms after each sublayer instead of before it,
// h + post_attention_layernorm(attn(h)) then h + post_feedforward_layernorm(mlp(h)) (SublayerSpec::out_norm; no
// input norms); Llama's attention with biases on q/k/v/o when attention_bias, one RMSNorm over all of q_proj's
// output and one over k_proj's before the heads split (OLMoE's q/k norms across heads, here over
// num_attention_heads · head_dim and num_key_value_heads · head_dim); a SwiGLU MLP without biases. Defaults:
// transformers 5.17's Olmo2Config (OlmoConfig's: pad 1, eos 50279; rms_norm_eps 1e-5). Olmo2RMSNorm multiplies by
// its weight in fp32 before rounding to the input's dtype, as the GPU engine's norm kernels do (one rounding, of
// the fp32 product).
// OLMo-3 adds sliding windows where layer_types puts them (absent: every layer but each 4th, sliding_window 4096)
// and RoPE per layer type, as Olmo3Config.convert_rope_params_to_dict resolves it (olmo3_ropes below).
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

using nlohmann::json;

const DecoderDefaults kOlmo2Defaults{.vocab_size = 50304,
                                     .hidden_size = 4096,
                                     .intermediate_size = 11008,
                                     .num_hidden_layers = 32,
                                     .num_attention_heads = 32,
                                     .max_position_embeddings = 2048,
                                     .rms_norm_eps = 1e-5};

DecoderConfig read_olmo2_config(const io::ConfigReader& r, const DecoderDefaults& defaults) {
  DecoderConfig c = read_decoder_config(r, defaults);
  apply_token_id_defaults(r, {.pad = 1, .bos = std::nullopt, .eos = 50279}, c.spec);
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  c.attention.qk_norm = c.attention.qk_norm_across_heads = true;
  return c;
}

ModelSpec describe_olmo2(const io::ConfigReader& r) {
  DecoderConfig c = read_olmo2_config(r, kOlmo2Defaults);
  for (LayerSpec& layer : c.spec.layers)
    layer = attention_then_output_normed(c.attention, MlpSpec{c.intermediate_size});
  finish_decoder(c);
  return c.spec;
}

// Olmo3Config's RoPE: one dict per layer type. rope_parameters holds them ({"full_attention": ..., "sliding_attention":
// ...}; a missing one is default RoPE); the older rope_scaling spelling is the full-attention layers' schedule, the
// sliding ones keeping default RoPE. A top-level rope_theta goes to the full-attention dict alone (the config class
// pops it there); a dict without one takes Olmo3Config's default_theta, 500000.
struct Olmo3Ropes {
  json full, sliding;
};

Olmo3Ropes olmo3_ropes(const io::ConfigReader& r) {
  const json default_rope = {{"rope_type", "default"}};
  const json* given = r.find("rope_parameters");
  if (given && !given->is_object()) fail("'rope_parameters' must be an object");
  if (given && !given->empty() && !given->contains("full_attention") && !given->contains("sliding_attention"))
    refuse("rope_parameters", "one dict for every layer",
           "OLMo-3's RoPE outside its per-layer-type dicts (Olmo3Config ignores such a dict and runs default RoPE)");
  Olmo3Ropes ropes{default_rope, default_rope};
  if (given && given->contains("full_attention") && !(*given)["full_attention"].is_null())
    ropes.full = (*given)["full_attention"];
  if (given && given->contains("sliding_attention") && !(*given)["sliding_attention"].is_null())
    ropes.sliding = (*given)["sliding_attention"];
  if (const json* scaling = r.find("rope_scaling"); scaling && scaling->is_object() && !scaling->empty())
    ropes.full.update(*scaling);
  for (json* dict : {&ropes.full, &ropes.sliding})
    if (!dict->is_object()) fail("'rope_parameters' holds a layer type's RoPE that is not an object: {}", dict->dump());
  if (!ropes.full.contains("rope_theta")) ropes.full["rope_theta"] = r.number("rope_theta", 500000.0);
  if (!ropes.sliding.contains("rope_theta")) ropes.sliding["rope_theta"] = 500000.0;
  return ropes;
}

ModelSpec describe_olmo3(const io::ConfigReader& r) {
  const Olmo3Ropes ropes = olmo3_ropes(r);
  // The shared reading takes the full-attention layers' RoPE as the config's own; the sliding layers' is read alike.
  json config = r.object();
  config.erase("rope_scaling");
  config["rope_parameters"] = ropes.full;
  const io::ConfigReader patched(config);
  DecoderDefaults defaults = kOlmo2Defaults;
  defaults.has_layer_types = true;
  DecoderConfig c = read_olmo2_config(patched, defaults);
  const ops::RopeSpec sliding_rope =
      read_rope_dict(ropes.sliding, "rope_parameters", patched, c.spec.max_position_embeddings, defaults);
  std::vector<std::string> types = r.strings("layer_types");
  if (types.empty())
    for (int64_t i = 0; i < c.spec.num_layers(); ++i)
      types.push_back((i + 1) % 4 != 0 ? "sliding_attention" : "full_attention");
  const std::vector<std::optional<int64_t>> windows =
      windows_of_layer_types(types, every_layer_window(r, 4096), c.spec.num_layers(), sliding_window_key(r));
  for (size_t i = 0; i < c.spec.layers.size(); ++i) {
    AttentionSpec attention = c.attention;
    attention.sliding_window = windows[i];
    if (windows[i]) attention.rope = sliding_rope;
    c.spec.layers[i] = attention_then_output_normed(attention, MlpSpec{c.intermediate_size});
  }
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kOlmo2Family{"Olmo2ForCausalLM", "olmo2", describe_olmo2, standard_decoder_parameters};
extern const Family kOlmo3Family{"Olmo3ForCausalLM", "olmo3", describe_olmo3, standard_decoder_parameters};

}  // namespace moetune::model
