// FlexOlmoForCausalLM (FlexOlmo): OLMo-2's layers (norms on the sublayers' outputs before the residual add, none on
// their inputs; q/k norms across heads; biases on q/k/v/o with attention_bias) with OLMoE's MoE layer in place of
// the MLP on every layer (softmax top-k router, renormalised when norm_topk_prob; SwiGLU experts of
// intermediate_size); the load-balancing loss when output_router_logits. Defaults: transformers 5.17's
// FlexOlmoConfig (pad 100277, eos 100257, rms_norm_eps 1e-6, rope_theta 500000, 7 experts, top-5). The CPU engine runs
// it; the GPU's MoE block does not yet norm its output (model/device_support.h names it).
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 100352,
                                            .hidden_size = 4096,
                                            .intermediate_size = 11008,
                                            .num_hidden_layers = 32,
                                            .num_attention_heads = 32,
                                            .max_position_embeddings = 4096,
                                            .rms_norm_eps = 1e-6,
                                            .rope_theta = 500000.0});
  apply_token_id_defaults(r, {.pad = 100277, .bos = std::nullopt, .eos = 100257}, c.spec);
  AttentionSpec& a = c.attention;
  a.qkv_bias = a.o_bias = r.boolean("attention_bias", false);
  a.qk_norm = a.qk_norm_across_heads = true;
  const MoeSpec moe = read_olmoe_moe(r, c.intermediate_size, /*experts=*/7, /*top_k=*/5);
  for (LayerSpec& layer : c.spec.layers) layer = attention_then_output_normed(a, moe);
  read_load_balancing_loss(r, c.spec, /*FlexOlmoConfig's router_aux_loss_coef*/ 0.01);
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kFlexOlmoFamily{"FlexOlmoForCausalLM", "flex_olmo", describe, standard_decoder_parameters};

}  // namespace moetune::model
