// SmolLM3ForCausalLM (SmolLM3): Llama's decoder (biases on q/k/v/o with attention_bias, on the MLP with mlp_bias)
// whose layers marked 0 in no_rope_layers attend without any positional embedding (NoPE; absent, every
// no_rope_layer_interval-th layer, as SmolLM3Config fills it in), and sliding windows where layer_types puts them
// (absent: the NoPE layers, when use_sliding_window and a sliding_window are set). A sliding layer's mask is
// masking_utils' sliding one over config.sliding_window whatever use_sliding_window says, as SmolLM3Model builds it.
// Defaults: transformers 5.17's SmolLM3Config (tied embeddings; pad 128004, bos 128000, eos 128001).
#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

// Whether each layer rotates its q and k: no_rope_layers (1 rotates, 0 is NoPE), else every interval-th layer NoPE.
std::vector<bool> rope_layers(const io::ConfigReader& r, int64_t layers) {
  std::vector<bool> rotates(static_cast<size_t>(layers));
  if (r.has("no_rope_layers")) {
    const std::vector<int64_t> listed = r.integers("no_rope_layers");
    if (int64_t(listed.size()) < layers)
      fail("'no_rope_layers' lists {} layers, fewer than num_hidden_layers ({})", listed.size(), layers);
    for (size_t i = 0; i < rotates.size(); ++i) rotates[i] = listed[i] != 0;
    return rotates;
  }
  const int64_t interval = r.integer("no_rope_layer_interval", 4);
  if (interval == 0) fail("'no_rope_layer_interval' must not be 0");
  for (int64_t i = 0; i < layers; ++i) rotates[size_t(i)] = (i + 1) % interval != 0;  // Python's % on ints
  return rotates;
}

// layer_types, else SmolLM3Config's: the NoPE layers slide when use_sliding_window and a sliding_window are set.
std::vector<std::string> layer_types(const io::ConfigReader& r, const std::vector<bool>& rotates) {
  std::vector<std::string> types = r.strings("layer_types");
  if (types.empty())
    for (const bool rope : rotates)
      types.push_back(r.boolean("use_sliding_window", false) && r.has("sliding_window") && !rope ? "sliding_attention"
                                                                                                 : "full_attention");
  return types;
}

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 128256,
                                            .hidden_size = 2048,
                                            .intermediate_size = 11008,
                                            .num_hidden_layers = 36,
                                            .num_attention_heads = 16,
                                            .num_key_value_heads = 4,
                                            .max_position_embeddings = 32768,
                                            .has_layer_types = true});
  c.spec.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  apply_token_id_defaults(r, {.pad = 128004, .bos = 128000, .eos = 128001}, c.spec);
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  const std::vector<bool> rotates = rope_layers(r, c.spec.num_layers());
  const std::vector<std::optional<int64_t>> windows = windows_of_layer_types(
      layer_types(r, rotates), r.optional_integer("sliding_window"), c.spec.num_layers(), sliding_window_key(r));
  const MlpSpec mlp{c.intermediate_size, r.boolean("mlp_bias", false)};
  for (size_t i = 0; i < c.spec.layers.size(); ++i) {
    AttentionSpec attention = c.attention;
    attention.sliding_window = windows[i];
    if (!rotates[i]) attention.rope = ops::RopeSpec{.type = "none"};
    c.spec.layers[i] = attention_then(attention, mlp);
  }
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kSmolLM3Family{"SmolLM3ForCausalLM", "smollm3", describe, standard_decoder_parameters};

}  // namespace moetune::model
