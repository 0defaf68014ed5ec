// IBM Granite's decoders as transformers 5.17's modeling_granite / modeling_granitemoe / modeling_granitemoeshared
// compute them: Llama's layers (Mixtral's for the MoE ones) with four multipliers of μP training —
// - embedding_multiplier: the embedding's rows times it (ModelSpec::embedding_scale, as the fp32 number: transformers
//   multiplies by a Python float, unlike Gemma's bf16 buffer);
// - attention_multiplier: the softmax scale itself (AttentionSpec::scaling; 1.0 when absent, not 1 / sqrt(d));
// - residual_multiplier: h + m · sublayer(h) for attention and the MLP / MoE alike (SublayerSpec::residual_scale);
// - logits_scaling: the LM head's logits divided by it (ModelSpec::logits_divisor).
// GraniteMoe: every layer MoE, a router without bias whose top-k logits are softmaxed among themselves (GPT-OSS's
// order), experts of intermediate_size stacked in block_sparse_moe.input_linear [E, 2I, H] (gate; up) and
// output_linear [E, H, I], the router in router.layer (transformers 5.17 saves those names and holds
// experts.gate_up_proj / experts.down_proj / router.weight in memory: both load); the load-balancing loss when
// output_router_logits. GraniteMoeShared adds an ungated shared MLP beside the MoE block, shared_mlp.input_linear
// [2S, H] (gate; up) and output_linear, of shared_intermediate_size (0: none), summed with the routed output before
// the residual multiplier. Defaults: transformers 5.17's GraniteConfig, GraniteMoeConfig, GraniteMoeSharedConfig.
#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

// A multiplier's value: transformers multiplies (or divides) by whatever the config holds, so an explicit null
// fails there; refused here by key.
double multiplier(const io::ConfigReader& r, const char* key) {
  if (r.is_null(key)) refuse(key, "null", "a null multiplier (transformers multiplies by it)");
  return r.number(key, 1.0);
}

DecoderConfig read_granite_config(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 32000,
                                            .hidden_size = 4096,
                                            .intermediate_size = 11008,
                                            .num_hidden_layers = 32,
                                            .max_position_embeddings = 2048});
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  c.attention.scaling = multiplier(r, "attention_multiplier");
  c.spec.embedding_scale = multiplier(r, "embedding_multiplier");
  c.spec.embedding_scale_in_activation_dtype = false;
  c.spec.logits_divisor = multiplier(r, "logits_scaling");
  if (c.spec.logits_divisor == 0.0) refuse("logits_scaling", "0", "logits divided by zero");
  return c;
}

// Every sublayer's output times residual_multiplier before the residual add; then the shared checks.
void finish_granite(const io::ConfigReader& r, DecoderConfig& c) {
  const double residual = multiplier(r, "residual_multiplier");
  for (LayerSpec& layer : c.spec.layers)
    for (SublayerSpec& sublayer : layer.sublayers) sublayer.residual_scale = residual;
  finish_decoder(c);
}

ModelSpec describe_granite(const io::ConfigReader& r) {
  DecoderConfig c = read_granite_config(r);
  const MlpSpec mlp{c.intermediate_size, r.boolean("mlp_bias", false)};
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, mlp);
  finish_granite(r, c);
  return c.spec;
}

MoeSpec read_granite_moe(const io::ConfigReader& r, const DecoderConfig& c) {
  MoeSpec moe;
  moe.router.num_experts = r.integer("num_local_experts", 8);
  moe.router.top_k = r.integer("num_experts_per_tok", 2);
  moe.router.topk_before_softmax = true;
  moe.experts.intermediate = c.intermediate_size;
  return moe;
}

ModelSpec describe_granite_moe(const io::ConfigReader& r, bool shared_mlp) {
  DecoderConfig c = read_granite_config(r);
  MoeSpec moe = read_granite_moe(r, c);
  if (shared_mlp) {
    const int64_t shared = r.integer("shared_intermediate_size", 0);
    if (shared < 0) fail("'shared_intermediate_size' must not be negative, got {}", shared);
    if (shared > 0) moe.shared_expert = SharedExpertSpec{MlpSpec{shared}};
  }
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, moe);
  read_load_balancing_loss(r, c.spec);
  finish_granite(r, c);
  return c.spec;
}

ModelSpec describe_granite_moe(const io::ConfigReader& r) { return describe_granite_moe(r, false); }
ModelSpec describe_granite_moe_shared(const io::ConfigReader& r) { return describe_granite_moe(r, true); }

MoeTensorNames granite_moe_names() {
  MoeTensorNames names;
  names.block = names.fused_block = "block_sparse_moe";
  names.router = "router.layer";
  names.fused_router = "router";
  names.stacked_gate_up = "input_linear";
  names.stacked_down = "output_linear";
  names.shared_expert = "shared_mlp";
  names.shared_expert_beside_block = true;
  names.shared_expert_gate_up = "input_linear";
  names.shared_expert_down = "output_linear";
  return names;
}

std::vector<ParameterSpec> granite_moe_parameters(const ModelSpec& spec) {
  return decoder_parameters(spec, granite_moe_names());
}

}  // namespace

extern const Family kGraniteFamily{"GraniteForCausalLM", "granite", describe_granite, standard_decoder_parameters};
extern const Family kGraniteMoeFamily{"GraniteMoeForCausalLM", "granitemoe", describe_granite_moe,
                                      granite_moe_parameters};
extern const Family kGraniteMoeSharedFamily{"GraniteMoeSharedForCausalLM", "granitemoeshared",
                                            describe_granite_moe_shared, granite_moe_parameters};

}  // namespace moetune::model
