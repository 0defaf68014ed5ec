// Qwen2MoeForCausalLM: GQA attention with q/k/v biases (qkv_bias) and none on o, no q/k norm; MoE layers (where
// mlp_only_layers / decoder_sparse_step say) with a softmax top-k router (renormalised when norm_topk_prob),
// SwiGLU experts and a shared expert whose output is scaled by sigmoid(shared_expert_gate(x)); dense layers
// otherwise; the load-balancing loss when output_router_logits. Defaults: transformers v5's Qwen2MoeConfig.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

// Qwen2MoeConfig without layer_types (unlike Qwen2Config): with use_sliding_window, the even layers below
// max_window_layers slide.
bool qwen2_moe_sliding(int64_t layer, int64_t max_window_layers, bool windowed) {
  return windowed && layer % 2 == 0 && layer < max_window_layers;
}

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 151936, .hidden_size = 2048, .intermediate_size = 5632,
                                            .num_hidden_layers = 24, .num_attention_heads = 16,
                                            .num_key_value_heads = 16,  // Qwen2MoeConfig's default, not the heads
                                            .max_position_embeddings = 32768, .has_layer_types = true});
  const std::vector<std::optional<int64_t>> windows =
      qwen_sliding_windows(r, c.spec.num_layers(), /*reads_layer_types=*/true, qwen2_moe_sliding);
  c.attention.qkv_bias = r.boolean("qkv_bias", true);
  MoeSpec moe;
  moe.router.num_experts = r.integer("num_experts", 60);
  moe.router.top_k = r.integer("num_experts_per_tok", 4);
  moe.router.renormalize = r.boolean("norm_topk_prob", false);
  moe.experts.intermediate = r.integer("moe_intermediate_size", 1408);
  moe.shared_expert = SharedExpertSpec{MlpSpec{r.integer("shared_expert_intermediate_size", 5632)}, /*sigmoid_gate=*/true};
  build_qwen_moe_layers(r, c, moe, windows);
  return c.spec;
}

}  // namespace

extern const Family kQwen2MoeFamily{"Qwen2MoeForCausalLM", "qwen2_moe", describe, standard_decoder_parameters};

}  // namespace moetune::model
