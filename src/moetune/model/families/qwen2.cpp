// Qwen2ForCausalLM (Qwen2, Qwen2.5): Llama's shape with biases on q/k/v (never on o, whatever attention_bias
// says: Qwen2Config has no such key), no q/k norm, and sliding windows where Qwen2Config puts them (layer_types,
// else the layers from max_window_layers on when use_sliding_window). Defaults: transformers v5's Qwen2Config.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 151936, .hidden_size = 4096, .intermediate_size = 22016,
                                            .num_hidden_layers = 32, .num_key_value_heads = 32,
                                            .max_position_embeddings = 32768, .has_layer_types = true});
  const std::vector<std::optional<int64_t>> windows =
      qwen_sliding_windows(r, c.spec.num_layers(), /*reads_layer_types=*/true, slides_from_max_window_layers);
  c.attention.qkv_bias = true;
  build_dense_layers(c, windows);
  return c.spec;
}

}  // namespace

extern const Family kQwen2Family{"Qwen2ForCausalLM", "qwen2", describe, standard_decoder_parameters};

}  // namespace moetune::model
