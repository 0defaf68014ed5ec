// GemmaForCausalLM (Gemma 1: gemma-2b, gemma-7b, CodeGemma; model_type gemma) and Gemma3ForCausalLM (Gemma 3's
// text models: gemma-3-270m, gemma-3-1b; model_type gemma3_text), as transformers 5.17's modeling_gemma and
// modeling_gemma3 compute them. Both:
// - every RMSNorm scales by 1 + weight (GemmaRMSNorm / Gemma3RMSNorm: weights stored as the offset from 1, the
//   product in fp32; SublayerSpec::norm_weight_offset, ModelSpec::final_norm_weight_offset);
// - the embedding's rows times sqrt(hidden_size) (ModelSpec::embedding_scale; the tied LM head reads the table);
// - a gated MLP (gelu_pytorch_tanh by default), biases on q/k/v/o when attention_bias, tied by default;
// - bidirectional attention refused by key.
// Gemma 1: Llama's pre-norm layers, full attention, the gate from hidden_act (5.17 reads no hidden_activation).
// Gemma 3 adds:
// - sandwich norms: h + post_attention_layernorm(attn(input_layernorm(h))), then h + post_feedforward_layernorm(
//   mlp(pre_feedforward_layernorm(h)));
// - per-head q/k norms before RoPE, the softmax scale query_pre_attn_scalar^-0.5 (AttentionSpec);
// - sliding windows where layer_types says (absent: all but every sliding_window_pattern-th layer, 6 by default),
//   RoPE per layer type (full: rope_theta, default 1e6, with rope_scaling; sliding: rope_local_base_freq, 10000);
// - the gate from hidden_activation (Gemma 3 never reads hidden_act).
// Refused by key: attention and final-logit softcapping (Gemma 2's; Gemma 3 sets neither).
// Gemma3ForConditionalGeneration (the 4B+ vision-language models) is another architecture and is not read here.
#include <cmath>

#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

using nlohmann::json;

// Gemma3TextConfig's defaults (gemma-3-4b's text widths).
const DecoderDefaults kGemma3Defaults{.vocab_size = 262208,
                                      .hidden_size = 2304,
                                      .intermediate_size = 9216,
                                      .num_hidden_layers = 26,
                                      .num_attention_heads = 8,
                                      .num_key_value_heads = 4,
                                      .head_dim = 256,
                                      .max_position_embeddings = 131072,
                                      .rms_norm_eps = 1e-6,
                                      .rope_theta = 1e6,
                                      .has_layer_types = true,
                                      .hidden_act_key = "hidden_activation",
                                      .hidden_act_default = "gelu_pytorch_tanh"};

// Gemma3RMSNorm: x̂ · (1 + weight).
constexpr float kGemmaNormOffset = 1.0f;

void refuse_set(const io::ConfigReader& r, const char* key, const std::string& feature) {
  if (const json* value = r.find(key); value && !value->is_null()) refuse(key, value->dump(), feature);
}

// What both generations share once read_decoder_config has run: token ids, tying, the scaled embedding, the
// offset final norm, attention biases; bidirectional attention refused.
void read_gemma_common(const io::ConfigReader& r, DecoderConfig& c) {
  if (r.truthy("use_bidirectional_attention", false))
    refuse("use_bidirectional_attention", "true", "bidirectional attention in a causal LM (EmbeddingGemma)");
  apply_token_id_defaults(r, {.pad = 0, .bos = 2, .eos = 1}, c.spec);
  c.spec.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  c.spec.embedding_scale = std::sqrt(double(c.spec.hidden_size));
  c.spec.final_norm_weight_offset = kGemmaNormOffset;
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
}

// GemmaConfig's defaults (gemma-7b's widths).
const DecoderDefaults kGemmaDefaults{.vocab_size = 256000,
                                     .hidden_size = 3072,
                                     .intermediate_size = 24576,
                                     .num_hidden_layers = 28,
                                     .num_attention_heads = 16,
                                     .num_key_value_heads = 16,
                                     .head_dim = 256,
                                     .max_position_embeddings = 8192,
                                     .rms_norm_eps = 1e-6,
                                     .hidden_act_default = "gelu_pytorch_tanh"};

ModelSpec describe_gemma(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, kGemmaDefaults);
  read_gemma_common(r, c);
  for (LayerSpec& layer : c.spec.layers) {
    layer = attention_then(c.attention, MlpSpec{c.intermediate_size});
    for (SublayerSpec& sublayer : layer.sublayers) sublayer.norm_weight_offset = kGemmaNormOffset;
  }
  finish_decoder(c);
  return c.spec;
}

// layer_types as written, else Gemma3TextConfig's: every sliding_window_pattern-th layer full, the rest sliding.
std::vector<std::string> gemma3_layer_types(const io::ConfigReader& r, int64_t num_layers) {
  std::vector<std::string> types = r.strings("layer_types");
  if (!types.empty()) return types;
  // Python's % by a negative pattern leaves the same zeros as by its magnitude.
  const int64_t every = std::abs(r.integer("sliding_window_pattern", 6));
  if (every == 0) fail("'sliding_window_pattern' must not be 0 (Gemma3TextConfig divides by it)");
  for (int64_t i = 0; i < num_layers; ++i)
    types.push_back((i + 1) % every != 0 ? "sliding_attention" : "full_attention");
  return types;
}

ModelSpec describe_gemma3(const io::ConfigReader& r) {
  refuse_set(r, "attn_logit_softcapping", "softcapping of the attention scores");
  refuse_set(r, "final_logit_softcapping", "softcapping of the final logits");
  const LayerTypeRopes ropes = read_layer_type_ropes(r, {1e6, "rope_local_base_freq", 10000.0}, "Gemma 3");
  // The shared reading takes the full-attention layers' RoPE as the config's own; the sliding layers' is read alike.
  json config = r.object();
  config.erase("rope_scaling");
  config["rope_parameters"] = ropes.full;
  const io::ConfigReader patched(config);
  DecoderConfig c = read_decoder_config(patched, kGemma3Defaults);
  read_gemma_common(r, c);
  AttentionSpec& a = c.attention;
  a.qk_norm = true;
  a.query_pre_attn_scalar = r.number("query_pre_attn_scalar", 256.0);
  if (!(a.query_pre_attn_scalar > 0))
    fail("'query_pre_attn_scalar' must be positive (its -1/2 power scales the scores), got {}",
         a.query_pre_attn_scalar);

  const ops::RopeSpec sliding_rope =
      read_rope_dict(ropes.sliding, "rope_parameters", patched, c.spec.max_position_embeddings, kGemma3Defaults);
  const std::vector<std::optional<int64_t>> windows =
      windows_of_layer_types(gemma3_layer_types(r, c.spec.num_layers()), every_layer_window(r, 4096),
                             c.spec.num_layers(), sliding_window_key(r));
  for (size_t i = 0; i < c.spec.layers.size(); ++i) {
    AttentionSpec attention = a;
    attention.sliding_window = windows[i];
    if (windows[i]) attention.rope = sliding_rope;
    c.spec.layers[i] =
        LayerSpec{{SublayerSpec{"input_norm", attention, "attn_out_norm", kGemmaNormOffset},
                   SublayerSpec{"post_attn_norm", MlpSpec{c.intermediate_size}, "mlp_out_norm", kGemmaNormOffset}}};
  }
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kGemmaFamily{"GemmaForCausalLM", "gemma", describe_gemma, standard_decoder_parameters};
extern const Family kGemma3Family{"Gemma3ForCausalLM", "gemma3_text", describe_gemma3, standard_decoder_parameters};

}  // namespace moetune::model
