// SolarOpenForCausalLM (Upstage's Solar Open): Llama's attention (biases on q/k/v with attention_bias, none on
// o_proj) with RoPE over the whole head, and every layer GLM-4-MoE's MoE layer (DeepSeek-V3's sigmoid group-limited
// router with its correction bias, n_shared_experts shared experts; sigmoid_group_moe.h). No dense layers, no
// q/k norms, no next-token-prediction layers (SolarOpenConfig removes those keys). No aux loss (transformers
// trains none). Defaults: transformers 5.17's SolarOpenConfig (rope_theta 1e6). A partial_rotary_factor other
// than 1 is refused: Glm4MoeRotaryEmbedding would shorten cos and sin, which Llama's attention cannot apply.
#include <fmt/format.h>

#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/sigmoid_group_moe.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 196608,
                                            .hidden_size = 4096,
                                            .num_hidden_layers = 48,
                                            .num_attention_heads = 64,
                                            .num_key_value_heads = 8,
                                            .head_dim = 128,
                                            .max_position_embeddings = 131072,
                                            .rms_norm_eps = 1e-5,
                                            .rope_theta = 1e6,
                                            .partial_rotary_factor = 1.0});
  if (c.attention.rope.partial_rotary_factor != 1.0)
    refuse("partial_rotary_factor", fmt::format("{}", c.attention.rope.partial_rotary_factor),
           "partial RoPE in Solar Open (transformers' Llama attention there cannot apply it)");
  c.attention.qkv_bias = r.boolean("attention_bias", false);
  const MoeSpec moe = read_sigmoid_group_moe(r, {.routed_experts = 128,
                                                 .groups = 1,
                                                 .topk_groups = 1,
                                                 .top_k = 8,
                                                 .moe_intermediate_size = 1280,
                                                 .shared_experts = 1,
                                                 .routed_scaling_factor = 1.0});
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, moe);
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kSolarOpenFamily{"SolarOpenForCausalLM", "solar_open", describe, shared_experts_decoder_parameters};

}  // namespace moetune::model
