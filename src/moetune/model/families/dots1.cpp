// Dots1ForCausalLM (rednote-hilab's dots.llm1): Qwen3's attention (per-head q/k RMSNorm before RoPE, biases on
// q/k/v/o with attention_bias, head_dim = hidden / heads unless config.json writes one; sliding windows where
// layer_types puts them, else from max_window_layers on when sliding_window is set) and DeepSeek-V3's MoE layer
// (sigmoid_group_moe.h: the sigmoid group-limited router with its correction bias, n_shared_experts shared
// experts) after first_k_dense_replace dense layers. No aux loss (transformers trains none).
// Defaults: transformers 5.17's Dots1Config, whose norm_topk_prob (False) and routed_scaling_factor (1.0) differ
// from DeepSeek-V3's, and whose n_routed_experts, num_experts_per_tok and n_shared_experts default to None
// (transformers cannot build such a model: those keys are required here).
#include <string>

#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/family.h"
#include "moetune/model/families/sigmoid_group_moe.h"

namespace moetune::model {
namespace {

// layer_types as written, else Dots1Config's: sliding from max_window_layers on when sliding_window is set.
std::vector<std::string> layer_types(const io::ConfigReader& r, int64_t layers, bool windowed) {
  std::vector<std::string> types = r.strings("layer_types");
  if (!types.empty()) return types;
  const int64_t max_window_layers = r.integer("max_window_layers", 62);
  for (int64_t i = 0; i < layers; ++i)
    types.push_back(windowed && i >= max_window_layers ? "sliding_attention" : "full_attention");
  return types;
}

ModelSpec describe(const io::ConfigReader& r) {
  const bool has_experts = r.has("n_routed_experts") || r.has("num_local_experts");  // (its attribute_map's name)
  for (const char* key : {"n_routed_experts", "num_experts_per_tok", "n_shared_experts"})
    if (!r.has(key) && !(key == std::string("n_routed_experts") && has_experts))
      fail("config.json has no '{}' (Dots1Config's default is None, from which transformers builds no model)", key);
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 152064,
                                            .hidden_size = 4608,
                                            .intermediate_size = 10944,
                                            .num_hidden_layers = 62,
                                            .num_attention_heads = 32,
                                            .max_position_embeddings = 2048,
                                            .has_layer_types = true});
  const std::optional<int64_t> window = every_layer_window(r, 4096);  // absent: Dots1Config's 4096; null: none
  const std::vector<std::optional<int64_t>> windows = windows_of_layer_types(
      layer_types(r, c.spec.num_layers(), window.has_value()), window, c.spec.num_layers(), sliding_window_key(r));
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  c.attention.qk_norm = true;
  const MoeSpec moe = read_sigmoid_group_moe(r, {.groups = 1,
                                                 .topk_groups = 1,
                                                 .moe_intermediate_size = 1408,
                                                 .routed_scaling_factor = 1.0,
                                                 .norm_topk_prob = false});
  place_dense_then_moe_layers(r, 0, c.attention, moe, c.intermediate_size, c.spec);
  for (size_t i = 0; i < c.spec.layers.size(); ++i)
    std::get<AttentionSpec>(c.spec.layers[i].sublayers[0].mixer).sliding_window = windows[i];
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kDots1Family{"Dots1ForCausalLM", "dots1", describe, shared_experts_decoder_parameters};

}  // namespace moetune::model
