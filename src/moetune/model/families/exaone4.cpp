// Exaone4ForCausalLM (LG's EXAONE 4.0): OLMo-2's layers (norms on the sublayers' outputs before the residual add,
// none on their inputs; a SwiGLU MLP without biases) with Qwen3's per-head q/k RMSNorm before RoPE and no
// attention biases. Sliding windows where layer_types puts them, else every layer but each
// sliding_window_pattern-th (4 by default); with a sliding_window set, only the sliding layers rotate q and k (the
// full-attention layers attend without positions), without one every layer does. Defaults: transformers 5.17's
// Exaone4Config (bos 0, eos 2, sliding_window 4096). Its __post_init__ cannot derive layer types without a window
// (it divides by 0) or from a string pattern ("LLLG": it takes the pattern's % as an int): refused here.
#include <cstdlib>
#include <string>

#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

// layer_types as written, else Exaone4Config's: a layer slides unless (layer + 1) is a multiple of the pattern.
std::vector<std::string> layer_types(const io::ConfigReader& r, int64_t layers, bool windowed) {
  std::vector<std::string> types = r.strings("layer_types");
  if (!types.empty()) return types;
  const nlohmann::json* pattern = r.find("sliding_window_pattern");
  if (!windowed)
    fail(
        "config.json has neither 'layer_types' nor a 'sliding_window': Exaone4Config cannot derive the layer types "
        "then (it divides by a pattern of 0)");
  if (pattern && !pattern->is_number_integer())
    fail(
        "'sliding_window_pattern' is {} without 'layer_types': Exaone4Config derives the layer types from an "
        "integer pattern only",
        pattern->dump().substr(0, 100));
  const int64_t every = std::abs(r.integer("sliding_window_pattern", 4));  // Python's % by a negative: the same zeros
  if (every == 0) fail("'sliding_window_pattern' must not be 0 (Exaone4Config divides by it)");
  for (int64_t i = 0; i < layers; ++i) types.push_back((i + 1) % every != 0 ? "sliding_attention" : "full_attention");
  return types;
}

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 102400,
                                            .hidden_size = 4096,
                                            .intermediate_size = 16384,
                                            .num_hidden_layers = 32,
                                            .num_attention_heads = 32,
                                            .num_key_value_heads = 32,
                                            .max_position_embeddings = 2048,
                                            .rms_norm_eps = 1e-5,
                                            .has_layer_types = true});
  apply_token_id_defaults(r, {.pad = std::nullopt, .bos = 0, .eos = 2}, c.spec);
  c.attention.qk_norm = true;
  const std::optional<int64_t> window = every_layer_window(r, 4096);  // absent: 4096; null: none
  const std::vector<std::optional<int64_t>> windows = windows_of_layer_types(
      layer_types(r, c.spec.num_layers(), window.has_value()), window, c.spec.num_layers(), sliding_window_key(r));
  for (size_t i = 0; i < c.spec.layers.size(); ++i) {
    AttentionSpec attention = c.attention;
    attention.sliding_window = windows[i];
    if (window && !windows[i]) attention.rope = ops::RopeSpec{.type = "none"};  // Exaone4Attention's global layers
    c.spec.layers[i] = attention_then_output_normed(attention, MlpSpec{c.intermediate_size});
  }
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kExaone4Family{"Exaone4ForCausalLM", "exaone4", describe, standard_decoder_parameters};

}  // namespace moetune::model
