// Glm4MoeLiteForCausalLM (GLM-4.7-Flash): DeepSeek-V3's multi-head latent attention (latent_attention.h) in a
// GLM-4-MoE decoder: each layer's MLP dense (intermediate_size) or DeepSeek-V3's MoE layer (sigmoid_group_moe.h,
// shared_experts) as mlp_layer_types says ("dense" / "sparse"; absent: the first dense, the rest sparse; the
// config class has no first_k_dense_replace). head_dim is the config class's other name for qk_rope_head_dim, and
// num_local_experts for n_routed_experts. No aux loss (transformers trains none). Multi-token-prediction layers in
// the files (model.layers.N past the last) are skipped and not saved.
// Defaults: transformers 5.17's Glm4MoeLiteConfig.
#include <fmt/format.h>

#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/latent_attention.h"
#include "moetune/model/families/sigmoid_group_moe.h"

namespace moetune::model {
namespace {

using nlohmann::json;

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 154880,
                                            .hidden_size = 2048,
                                            .intermediate_size = 10240,
                                            .num_hidden_layers = 47,
                                            .num_attention_heads = 20,
                                            .num_key_value_heads = 20,
                                            .max_position_embeddings = 202752,
                                            .rms_norm_eps = 1e-5,
                                            .per_head_kv = true});
  accept_fp8_quantization_only(r);
  // transformers' rotary table for this class is head_dim (= qk_rope_head_dim) · the rope dict's
  // partial_rotary_factor wide, while its attention rotates the whole rope part: any other factor fails there.
  if (const json* rope = r.find(rope_dict_key(r));
      rope && rope->is_object() && rope->contains("partial_rotary_factor")) {
    const json& factor = (*rope)["partial_rotary_factor"];
    if (!factor.is_number() || factor.get<double>() != 1.0)
      refuse("partial_rotary_factor", factor.dump(),
             "a rotary table narrower than qk_rope_head_dim (transformers fails on it)");
  }
  // The config class maps head_dim onto qk_rope_head_dim: a config naming both must agree.
  LatentAttentionDefaults widths{.q_lora_rank = 768, .qk_nope_head_dim = 192, .v_head_dim = 256};
  if (r.has("head_dim")) {
    const int64_t head_dim = r.integer("head_dim", widths.qk_rope_head_dim);
    if (r.has("qk_rope_head_dim") && r.integer("qk_rope_head_dim", head_dim) != head_dim)
      fail("'head_dim' ({}) and 'qk_rope_head_dim' ({}) name the same width in Glm4MoeLiteConfig and must agree",
           head_dim, r.integer("qk_rope_head_dim", head_dim));
    widths.qk_rope_head_dim = head_dim;
  }
  const AttentionSpec attention = read_latent_attention(r, c, widths);
  const MoeSpec moe = read_sigmoid_group_moe(r, {.routed_experts = 64,
                                                 .groups = 1,
                                                 .topk_groups = 1,
                                                 .top_k = 4,
                                                 .moe_intermediate_size = 1536,
                                                 .shared_experts = 1,
                                                 .routed_scaling_factor = 1.8});
  place_dense_and_moe_layers(sparse_layers_of(r, c.spec.num_layers(), /*dense_when_absent=*/1), attention, moe,
                             c.intermediate_size, c.spec);
  c.spec.carries_mtp_layers = true;  // model.layers.N past the last: the next-token-prediction layers
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kGlm4MoeLiteFamily{"Glm4MoeLiteForCausalLM", "glm4_moe_lite", describe,
                                       latent_attention_decoder_parameters};

}  // namespace moetune::model
