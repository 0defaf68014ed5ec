// DeepseekV2ForCausalLM (DeepSeek-V2, V2-Lite, DeepSeek-Coder-V2): DeepSeek-V3's multi-head latent attention
// (latent_attention.h), its RoPE always on interleaved pairs (transformers rotates them as complex numbers and
// keeps them interleaved; the engine's de-interleaved rotation gives the same q·k, and the rope part never reaches
// the output); the first first_k_dense_replace layers dense (intermediate_size), the rest MoE: a softmax router
// (fp32) choosing the top num_experts_per_tok experts, within the topk_group groups whose best expert scores
// highest when topk_method is group_limited_greedy, weights never renormalised (norm_topk_prob is not read) and
// multiplied by routed_scaling_factor; n_shared_experts shared experts of moe_intermediate_size each, added
// unscaled. No aux loss (transformers trains none). Defaults: transformers 5.17's DeepseekV2Config.
#include <string>

#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/latent_attention.h"
#include "moetune/model/families/sigmoid_group_moe.h"

namespace moetune::model {
namespace {

MoeSpec read_moe(const io::ConfigReader& r) {
  MoeSpec moe;
  RouterSpec& router = moe.router;
  router.num_experts = r.integer("num_experts", r.integer("n_routed_experts", 64));  // attribute_map's name wins
  if (!r.has("num_experts_per_tok"))
    fail(
        "config.json has no 'num_experts_per_tok' (DeepseekV2Config's default is None, which its router cannot "
        "take)");
  router.top_k = r.integer("num_experts_per_tok", 0);
  router.scaling_factor = r.number("routed_scaling_factor", 1.0);
  const std::string method = r.string("topk_method", "greedy");
  if (method == "group_limited_greedy") {
    if (!r.has("n_group") || !r.has("topk_group"))
      fail("topk_method 'group_limited_greedy' needs 'n_group' and 'topk_group' (DeepseekV2Config leaves them None)");
    router.num_groups = r.integer("n_group", 1);
    router.topk_groups = r.integer("topk_group", 1);
    check_expert_groups(router, /*min_group_size=*/1);  // groups rank by their best expert
  } else if (method != "greedy") {
    refuse("topk_method", method, "a top-k method other than greedy and group_limited_greedy");
  }
  moe.experts.intermediate = r.integer("moe_intermediate_size", 1407);
  if (r.is_null("n_shared_experts"))
    fail("config.json's 'n_shared_experts' is null (DeepseekV2Moe always builds its shared experts from it)");
  moe.shared_expert = read_shared_experts(r, moe.experts.intermediate, 2);
  return moe;
}

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 102400,
                                            .hidden_size = 4096,
                                            .intermediate_size = 11008,
                                            .num_hidden_layers = 32,
                                            .num_attention_heads = 32,
                                            .max_position_embeddings = 2048,
                                            .per_head_kv = true});
  apply_token_id_defaults(r, {.bos = 1, .eos = 2}, c.spec);
  if (r.boolean("mlp_bias", false)) refuse("mlp_bias", "true", "biases in DeepSeek-V2's dense and shared MLPs");
  AttentionSpec attention = read_latent_attention(r, c, {});  // DeepseekV2Config's widths are V3's
  attention.mla->rope_interleave = true;  // DeepseekV2Config has no rope_interleave: its RoPE is always on pairs
  const MoeSpec moe = read_moe(r);
  place_dense_then_moe_layers(r, 0, attention, moe, c.intermediate_size, c.spec);
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kDeepseekV2Family{"DeepseekV2ForCausalLM", "deepseek_v2", describe,
                                      latent_attention_decoder_parameters};

}  // namespace moetune::model
