// MiniMaxM2ForCausalLM (MiniMax-M2): GQA attention with one RMSNorm over all of q_proj's output and one over
// k_proj's (q_norm [heads · head_dim], k_norm [kv heads · head_dim]) and RoPE over partial_rotary_factor of each head
// (rope_parameters', else the top level's; the released config's rotary_dim is not read by transformers); every
// layer MoE with Mixtral's checkpoint names (block_sparse_moe, experts' w1 / w3 / w2) and a sigmoid router whose
// e_score_correction_bias (on the block) is added for the choice only, the top-k weights renormalised. No sliding
// window (unlike Mixtral). output_router_logits is refused: transformers' load-balancing loss takes a softmax top-k
// of the logits, not the sigmoid router's choice. Defaults: transformers 5.17's MiniMaxM2Config.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 200064,
                                            .hidden_size = 3072,
                                            .intermediate_size = 1536,
                                            .num_hidden_layers = 62,
                                            .num_attention_heads = 48,
                                            .num_key_value_heads = 8,
                                            .head_dim = 128,
                                            .max_position_embeddings = 196608,
                                            .rope_theta = 5e6,
                                            .partial_rotary_factor = 1.0});
  apply_token_id_defaults(r, {.pad = std::nullopt, .bos = 200034, .eos = 200020}, c.spec);
  if (r.boolean("output_router_logits", false))
    refuse("output_router_logits", "true", "MiniMax-M2's load-balancing loss (a softmax top-k of the router logits)");
  if (double noise = r.number("router_jitter_noise", 0.0); noise != 0.0)
    refuse("router_jitter_noise", fmt::format("{}", noise), "router jitter noise");
  c.attention.qk_norm = c.attention.qk_norm_across_heads = true;
  MoeSpec moe;
  moe.router.num_experts = r.integer("num_experts", r.integer("num_local_experts", 256));
  moe.router.top_k = r.integer("num_experts_per_tok", 8);
  moe.router.score = RouterScore::Sigmoid;
  moe.router.correction_bias = true;
  moe.router.renormalize = true;
  moe.experts.intermediate = c.intermediate_size;
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, moe);
  finish_decoder(c);
  return c.spec;
}

std::vector<ParameterSpec> parameters(const ModelSpec& spec) {
  MoeTensorNames names = mixtral_tensor_names();
  names.correction_bias = "e_score_correction_bias";
  return decoder_parameters(spec, names);
}

}  // namespace

extern const Family kMiniMaxM2Family{"MiniMaxM2ForCausalLM", "minimax_m2", describe, parameters};

}  // namespace moetune::model
