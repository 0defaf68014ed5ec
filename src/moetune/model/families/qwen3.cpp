// Qwen3ForCausalLM: Llama's shape plus RMSNorm over head_dim on q and k before RoPE; head_dim 128 by default
// (not hidden / heads). Defaults: transformers v5's Qwen3Config.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 151936, .hidden_size = 4096, .intermediate_size = 22016,
                                            .num_hidden_layers = 32, .num_key_value_heads = 32, .head_dim = 128,
                                            .max_position_embeddings = 32768, .has_layer_types = true});
  const std::vector<std::optional<int64_t>> windows =
      qwen_sliding_windows(r, c.spec.num_layers(), /*reads_layer_types=*/true, slides_from_max_window_layers);
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  c.attention.qk_norm = true;
  build_dense_layers(c, windows);
  return c.spec;
}

}  // namespace

extern const Family kQwen3Family{"Qwen3ForCausalLM", "qwen3", describe, standard_decoder_parameters};

}  // namespace moetune::model
