// MistralForCausalLM: Llama's shape without biases, head_dim explicit or hidden / heads, and a sliding window on
// every layer unless sliding_window is null (MistralConfig's default is 4096; a layer_types in config.json is
// kept but never read by MistralModel). Defaults: transformers v5's MistralConfig.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 32000, .hidden_size = 4096, .intermediate_size = 14336,
                                            .num_hidden_layers = 32, .num_key_value_heads = 8,
                                            .max_position_embeddings = 4096 * 32});
  build_dense_layers(c, std::vector(c.spec.layers.size(), every_layer_window(r, /*MistralConfig's default*/ 4096)));
  return c.spec;
}

}  // namespace

extern const Family kMistralFamily{"MistralForCausalLM", "mistral", describe, standard_decoder_parameters};

}  // namespace moetune::model
