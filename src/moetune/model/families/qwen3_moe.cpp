// Qwen3MoeForCausalLM: Qwen3's attention (q/k norm); MoE layers with a softmax top-k router (renormalised when
// norm_topk_prob) and SwiGLU experts, dense layers where mlp_only_layers / decoder_sparse_step say; the
// load-balancing loss when output_router_logits. Defaults: transformers v5's Qwen3MoeConfig.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

// Qwen3MoeConfig has no layer_types (one in config.json is kept but never read): with a window every layer slides
// (max_window_layers is not read either).
bool every_layer(int64_t, int64_t, bool windowed) { return windowed; }

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 151936, .hidden_size = 2048, .intermediate_size = 6144,
                                            .num_hidden_layers = 24, .num_key_value_heads = 4,
                                            .max_position_embeddings = 32768});
  const std::vector<std::optional<int64_t>> windows =
      qwen_sliding_windows(r, c.spec.num_layers(), /*reads_layer_types=*/false, every_layer);
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  c.attention.qk_norm = true;
  MoeSpec moe;
  // v5 writes num_local_experts, v4 num_experts; either may be present.
  moe.router.num_experts = r.integer("num_local_experts", r.integer("num_experts", 128));
  moe.router.top_k = r.integer("num_experts_per_tok", 8);
  moe.router.renormalize = r.boolean("norm_topk_prob", false);
  moe.experts.intermediate = r.integer("moe_intermediate_size", 768);
  build_qwen_moe_layers(r, c, moe, windows);
  return c.spec;
}

}  // namespace

extern const Family kQwen3MoeFamily{"Qwen3MoeForCausalLM", "qwen3_moe", describe, standard_decoder_parameters};

}  // namespace moetune::model
