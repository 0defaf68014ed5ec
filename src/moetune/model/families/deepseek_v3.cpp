// DeepseekV3ForCausalLM (DeepSeek-V3/R1, Kimi-K2, Moonlight): multi-head latent attention (model_spec.h's
// MlaSpec) with default or YaRN RoPE on the rope part only; the first first_k_dense_replace layers dense
// (intermediate_size), the rest MoE with DeepSeek's sigmoid group-limited router (e_score_correction_bias for
// the choice, a frozen buffer), n_shared_experts shared experts of moe_intermediate_size each, added unscaled.
// No aux loss (transformers trains none). Multi-token-prediction layers in the files are skipped and not saved;
// FP8 block-scaled checkpoints are dequantised on load and saved in bf16.
// Defaults: transformers 5.17's DeepseekV3Config.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/latent_attention.h"
#include "moetune/model/families/sigmoid_group_moe.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r,
                                        {.vocab_size = 129280, .hidden_size = 7168, .intermediate_size = 18432,
                                         .num_hidden_layers = 61, .num_attention_heads = 128,
                                         .num_key_value_heads = 128, .max_position_embeddings = 4096,
                                         .per_head_kv = true});
  accept_fp8_quantization_only(r);
  const AttentionSpec attention = read_latent_attention(r, c, {});  // DeepseekV3Config's defaults
  const MoeSpec moe = read_sigmoid_group_moe(r, {});  // DeepseekV3Config's defaults are SigmoidGroupMoeDefaults'
  place_dense_then_moe_layers(r, 3, attention, moe, c.intermediate_size, c.spec);
  c.spec.carries_mtp_layers = true;  // mtp.* if a conversion names its MTP module so; model.layers.K past the last too
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kDeepseekV3Family{"DeepseekV3ForCausalLM", "deepseek_v3", describe,
                                      latent_attention_decoder_parameters};

}  // namespace moetune::model
