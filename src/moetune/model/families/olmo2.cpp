// Olmo2ForCausalLM (OLMo-2) and Olmo3ForCausalLM (OLMo-3). OLMo-2: norms after each sublayer instead of before it,
// h + post_attention_layernorm(attn(h)) then h + post_feedforward_layernorm(mlp(h)) (SublayerSpec::out_norm; no
// input norms); Llama's attention with biases on q/k/v/o when attention_bias, one RMSNorm over all of q_proj's
// output and one over k_proj's before the heads split (OLMoE's q/k norms across heads, here over
// num_attention_heads · head_dim and num_key_value_heads · head_dim); a SwiGLU MLP without biases. Defaults:
// transformers 5.17's Olmo2Config (OlmoConfig's: pad 1, eos 50279; rms_norm_eps 1e-5). Olmo2RMSNorm multiplies by
// its weight in fp32 before rounding to the input's dtype, as the GPU engine's norm kernels do (one rounding, of
// the fp32 product).
// OLMo-3 adds sliding windows where layer_types puts them (absent: every layer but each 4th, sliding_window 4096)
// and RoPE per layer type, as Olmo3Config.convert_rope_params_to_dict resolves it (read_layer_type_ropes).
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

ModelSpec describe_olmo3(const io::ConfigReader& r) {
  // Olmo3Config's: the full-attention layers' theta from rope_theta, else default_theta 500000, as the sliding ones'.
  const LayerTypeRopes ropes = read_layer_type_ropes(r, {500000.0, nullptr, 500000.0}, "OLMo-3");
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
