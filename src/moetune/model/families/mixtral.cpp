// MixtralForCausalLM: GQA attention without biases or q/k norm; every layer MoE with a softmax top-k router that
// always renormalises the chosen weights, SwiGLU experts (w1 = gate, w3 = up, w2 = down in the original
// checkpoints); the load-balancing loss when output_router_logits. sliding_window is refused until sliding
// attention exists. Defaults: transformers v5's MixtralConfig.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 32000, .hidden_size = 4096, .intermediate_size = 14336,
                                            .num_hidden_layers = 32, .num_key_value_heads = 8,
                                            .max_position_embeddings = 4096 * 32, .rms_norm_eps = 1e-5,
                                            .rope_theta = 1e6});
  // MixtralModel takes the sliding mask on every layer when sliding_window is not null (MixtralConfig: none).
  c.attention.sliding_window = every_layer_window(r, std::nullopt);
  // The router's input jitter (MixtralSparseMoeBlock, in training mode) is random noise no step can reproduce.
  if (double noise = r.number("router_jitter_noise", 0.0); noise != 0.0)
    refuse("router_jitter_noise", fmt::format("{}", noise), "router jitter noise");
  MoeSpec moe;
  // attribute_map {"num_experts": "num_local_experts"}: the alias, set after the field, wins.
  moe.router.num_experts = r.integer("num_experts", r.integer("num_local_experts", 8));
  moe.router.top_k = r.integer("num_experts_per_tok", 2);
  moe.router.renormalize = true;
  moe.experts.intermediate = c.intermediate_size;  // Mixtral's experts are intermediate_size wide
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, moe);
  read_load_balancing_loss(r, c.spec);
  finish_decoder(c);
  return c.spec;
}

std::vector<ParameterSpec> parameters(const ModelSpec& spec) {
  return decoder_parameters(spec, mixtral_tensor_names());
}

}  // namespace

extern const Family kMixtralFamily{"MixtralForCausalLM", "mixtral", describe, parameters};

}  // namespace moetune::model
