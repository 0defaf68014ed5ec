// OlmoeForCausalLM (OLMoE): Llama's attention (biases on q/k/v/o with attention_bias) with one RMSNorm over all of
// q_proj's output and one over k_proj's before the heads are split (q_norm [hidden_size], k_norm [head_dim · kv
// heads]); every layer MoE with a softmax top-k router (renormalised when norm_topk_prob) and SwiGLU experts of
// intermediate_size; the load-balancing loss when output_router_logits. clip_qkv is refused. Defaults:
// transformers 5.17's OlmoeConfig (pad 1, eos 50279).
#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 50304,
                                            .hidden_size = 2048,
                                            .intermediate_size = 2048,
                                            .num_hidden_layers = 16,
                                            .num_attention_heads = 16,
                                            .max_position_embeddings = 4096,
                                            .rms_norm_eps = 1e-5});
  apply_token_id_defaults(r, {.pad = 1, .bos = std::nullopt, .eos = 50279}, c.spec);
  if (r.has("clip_qkv")) refuse("clip_qkv", r.find("clip_qkv")->dump(), "clamping q, k and v");
  AttentionSpec& a = c.attention;
  // q_norm is OlmoeRMSNorm(hidden_size) over q_proj's heads · head_dim outputs: they must be one width.
  if (a.num_heads * a.qk_head_dim != c.spec.hidden_size)
    fail("'head_dim' {} × 'num_attention_heads' {} is not 'hidden_size' {}, the width OLMoE's q_norm takes",
         a.qk_head_dim, a.num_heads, c.spec.hidden_size);
  a.qkv_bias = a.o_bias = r.boolean("attention_bias", false);
  a.qk_norm = a.qk_norm_across_heads = true;
  const MoeSpec moe = read_olmoe_moe(r, c.intermediate_size, /*experts=*/64, /*top_k=*/8);
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(a, moe);
  read_load_balancing_loss(r, c.spec, /*OlmoeConfig's router_aux_loss_coef*/ 0.01);
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kOlmoeFamily{"OlmoeForCausalLM", "olmoe", describe, standard_decoder_parameters};

}  // namespace moetune::model
