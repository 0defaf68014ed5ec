// Glm4MoeForCausalLM (GLM-4.5, GLM-4.5-Air, GLM-4.6, GLM-4.7): GQA attention with q/k/v biases when attention_bias
// (o_proj has none), per-head q/k RMSNorm when use_qk_norm, and RoPE on the first partial_rotary_factor of each
// head only (rotate-half within it; parameter_layout.h's PartialRotary says how the engine keeps such heads); the
// first first_k_dense_replace layers dense (intermediate_size), the rest DeepSeek-V3's MoE layer
// (sigmoid_group_moe.h) with shared_experts. No aux loss (transformers trains none). Multi-token-prediction layers
// in the files (num_nextn_predict_layers, stored as model.layers.N past the last) are skipped and not saved.
// Defaults: transformers 5.17's Glm4MoeConfig.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/sigmoid_group_moe.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 151552,
                                            .hidden_size = 4096,
                                            .intermediate_size = 10944,
                                            .num_hidden_layers = 46,
                                            .num_attention_heads = 96,
                                            .num_key_value_heads = 8,
                                            .max_position_embeddings = 131072,
                                            .rms_norm_eps = 1e-5,
                                            .partial_rotary_factor = 0.5});
  AttentionSpec attention = c.attention;
  attention.qkv_bias = r.boolean("attention_bias", false);
  attention.qk_norm = r.boolean("use_qk_norm", false);
  const MoeSpec moe = read_sigmoid_group_moe(r, {.routed_experts = 128,
                                                 .groups = 1,
                                                 .topk_groups = 1,
                                                 .top_k = 8,
                                                 .moe_intermediate_size = 1408,
                                                 .shared_experts = 1,
                                                 .routed_scaling_factor = 1.0});
  place_dense_then_moe_layers(r, 1, attention, moe, c.intermediate_size, c.spec);
  c.spec.carries_mtp_layers = true;  // model.layers.N past the last: the next-token-prediction layers
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kGlm4MoeFamily{"Glm4MoeForCausalLM", "glm4_moe", describe, shared_experts_decoder_parameters};

}  // namespace moetune::model
