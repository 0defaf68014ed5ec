// Glm4ForCausalLM (GLM-4-9B-0414, GLM-4-32B-0414, GLM-Z1; model_type glm4), as transformers 5.17's modeling_glm4
// computes it: GQA attention with biases on q/k/v (attention_bias, true by default) and none on o_proj, RoPE on
// interleaved pairs of each head's first partial_rotary_factor (0.5 by default) of its dimensions (the engine's
// partial rotary with AttentionSpec::rope_interleaved: rows reordered on load), an MLP whose gate and up are one
// tensor (mlp.gate_up_proj), and four norms a layer: input_layernorm before attention, post_self_attn_layernorm on its
// output before the residual add, post_attention_layernorm before the MLP, post_mlp_layernorm on its output.
// Defaults: transformers 5.17's Glm4Config (pad_token_id 151329, the embedding's padding row).
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 151552,
                                            .hidden_size = 4096,
                                            .intermediate_size = 13696,
                                            .num_hidden_layers = 40,
                                            .num_attention_heads = 32,
                                            .num_key_value_heads = 2,
                                            .head_dim = 128,
                                            .max_position_embeddings = 131072,
                                            .rms_norm_eps = 1.5625e-7,
                                            .partial_rotary_factor = 0.5});
  c.attention.qkv_bias = r.boolean("attention_bias", true);
  c.attention.rope_interleaved = true;
  apply_token_id_defaults(r, {.pad = 151329}, c.spec);
  for (LayerSpec& layer : c.spec.layers)
    layer = LayerSpec{{SublayerSpec{"input_norm", c.attention, "attn_out_norm"},
                       SublayerSpec{"post_attn_norm", MlpSpec{c.intermediate_size}, "mlp_out_norm"}}};
  finish_decoder(c);
  return c.spec;
}

std::vector<ParameterSpec> parameters(const ModelSpec& spec) {
  return decoder_parameters(spec, {},
                            {.gate_up = "gate_up_proj",
                             .out_normed_inputs = {"input_layernorm", "post_attention_layernorm"},
                             .out_norms = {"post_self_attn_layernorm", "post_mlp_layernorm"}});
}

}  // namespace

extern const Family kGlm4Family{"Glm4ForCausalLM", "glm4", describe, parameters};

}  // namespace moetune::model
