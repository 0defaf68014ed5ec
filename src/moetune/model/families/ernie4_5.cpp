// Ernie4_5_MoeForCausalLM (ERNIE-4.5-21B-A3B, ERNIE-4.5-300B-A47B; model_type ernie4_5_moe) and Ernie4_5ForCausalLM
// (ERNIE-4.5-0.3B; ernie4_5), as transformers 5.17's modeling_ernie4_5_moe / modeling_ernie4_5 compute them:
// - Llama's GQA attention whose RoPE rotates interleaved pairs of each head (AttentionSpec::rope_interleaved: the
//   q/k rows reordered to halves on load, back on save); head_dim from config.json, else hidden / heads (the MoE
//   config) or 128 (the dense one); no biases (use_bias true would put one on every projection and the LM head:
//   refused by key).
// - MoE layers where moe_layer_start_index <= layer <= moe_layer_end_index (-1: the last) and (layer + 1) %
//   moe_layer_interval == 0, the others a dense MLP of intermediate_size. The router (Ernie4_5_MoeTopKRouter):
//   softmax over the fp32 logits, the k experts of the largest p + e_score_correction_bias (moe_statics, a
//   buffer saved [1, E], never trained), their p renormalised (clamped at moe_norm_min, which moetune's plain sum
//   meets unless the k probabilities underflow); moe_num_shared_experts shared experts of moe_intermediate_size
//   each, added unscaled.
// - The load-balancing loss (output_router_logits) ranks the unbiased probabilities while the layer routes by the
//   biased ones: not implemented, so refused when asked for.
// - tie_word_embeddings true by default in both config classes.
#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

// The attention and the model-wide fields both classes share.
DecoderConfig read_ernie_common(const io::ConfigReader& r, const DecoderDefaults& defaults) {
  if (r.boolean("use_bias", false))
    refuse("use_bias", "true", "biases on every projection and on the LM head (ERNIE 4.5's use_bias)");
  DecoderConfig c = read_decoder_config(r, defaults);
  c.spec.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  c.attention.rope_interleaved = true;
  return c;
}

// Ernie4_5_MoeDecoderLayer's rule for a sparse layer.
std::vector<bool> ernie_sparse_layers(const io::ConfigReader& r, int64_t layers) {
  const int64_t start = r.integer("moe_layer_start_index", 1), interval = r.integer("moe_layer_interval", 1);
  int64_t end = r.integer("moe_layer_end_index", -1);
  if (end == -1) end = layers - 1;  // Ernie4_5_MoeConfig.__post_init__
  if (interval <= 0) fail("'moe_layer_interval' must be positive (transformers divides by it), got {}", interval);
  std::vector<bool> sparse(static_cast<size_t>(layers));
  for (int64_t layer = 0; layer < layers; ++layer)
    sparse[size_t(layer)] = (layer + 1) % interval == 0 && layer >= start && layer <= end;
  return sparse;
}

ModelSpec describe_ernie4_5_moe(const io::ConfigReader& r) {
  DecoderConfig c = read_ernie_common(r, {.vocab_size = 103424,
                                          .hidden_size = 2560,
                                          .intermediate_size = 12288,
                                          .num_hidden_layers = 28,
                                          .num_attention_heads = 20,
                                          .num_key_value_heads = 4,
                                          .max_position_embeddings = 131072,
                                          .rms_norm_eps = 1e-5,
                                          .rope_theta = 500000.0});
  if (r.boolean("output_router_logits", false))
    refuse("output_router_logits", "true",
           "ERNIE 4.5's load-balancing loss (it counts the top-k of the unbiased probabilities, not the experts the "
           "layer routes to)");
  MoeSpec moe;
  RouterSpec& router = moe.router;
  // Ernie4_5_MoeConfig's attribute_map: num_experts / num_experts_per_tok name moe_num_experts / moe_k.
  router.num_experts = r.integer("num_experts", r.integer("moe_num_experts", 64));
  router.top_k = r.integer("num_experts_per_tok", r.integer("moe_k", 6));
  router.correction_bias = true;
  router.renormalize = true;
  if (router.num_experts <= 0 || router.top_k <= 0 || router.top_k > router.num_experts)
    fail("'moe_k' ({}) must be between 1 and 'moe_num_experts' ({})", router.top_k, router.num_experts);
  if (!(r.number("moe_norm_min", 1e-12) >= 0))
    fail("'moe_norm_min' must not be negative, got {}", r.number("moe_norm_min", 1e-12));
  moe.experts.intermediate = r.integer("moe_intermediate_size", 1536);
  const int64_t shared = r.integer("moe_num_shared_experts", 2);
  if (shared < 0) fail("'moe_num_shared_experts' must not be negative, got {}", shared);
  if (shared > 0) moe.shared_expert = SharedExpertSpec{MlpSpec{moe.experts.intermediate * shared}, false};
  const std::vector<bool> sparse = ernie_sparse_layers(r, c.spec.num_layers());
  for (int64_t layer = 0; layer < c.spec.num_layers(); ++layer)
    c.spec.layers[size_t(layer)] = attention_then(
        c.attention, sparse[size_t(layer)] ? decltype(SublayerSpec::mixer)(moe) : MlpSpec{c.intermediate_size});
  finish_decoder(c);
  return c.spec;
}

ModelSpec describe_ernie4_5(const io::ConfigReader& r) {
  DecoderConfig c = read_ernie_common(r, {.vocab_size = 103424,
                                          .hidden_size = 1024,
                                          .intermediate_size = 3072,
                                          .num_hidden_layers = 18,
                                          .num_attention_heads = 16,
                                          .num_key_value_heads = 2,
                                          .head_dim = 128,
                                          .max_position_embeddings = 131072,
                                          .rms_norm_eps = 1e-5,
                                          .rope_theta = 500000.0});
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, MlpSpec{c.intermediate_size});
  finish_decoder(c);
  return c.spec;
}

// The MoE block's tensors as transformers saves them: mlp.gate.weight, mlp.experts.E.{gate,up,down}_proj.weight,
// mlp.shared_experts.*, and the correction bias on the block's moe_statics as [1, E].
std::vector<ParameterSpec> ernie4_5_moe_parameters(const ModelSpec& spec) {
  MoeTensorNames names;
  names.shared_expert = "shared_experts";
  names.correction_bias = "moe_statics.e_score_correction_bias";
  std::vector<ParameterSpec> parameters = decoder_parameters(spec, names);
  for (ParameterSpec& parameter : parameters)
    if (parameter.name.ends_with("moe.router_correction_bias")) {
      parameter.pieces[0].shape = {1, parameter.shape[0]};
      parameter.fused_hf_name.clear();  // saved on moe_statics whichever way the experts are stored
      parameter.counted_buffer = true;  // an nn.Parameter (requires_grad False) in transformers' model
    }
  return parameters;
}

}  // namespace

extern const Family kErnie4_5MoeFamily{"Ernie4_5_MoeForCausalLM", "ernie4_5_moe", describe_ernie4_5_moe,
                                       ernie4_5_moe_parameters};
extern const Family kErnie4_5Family{"Ernie4_5ForCausalLM", "ernie4_5", describe_ernie4_5, standard_decoder_parameters};

}  // namespace moetune::model
