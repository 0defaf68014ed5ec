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
  // Absent: MistralConfig's 4096; an explicit null: full attention.
  const bool null_window = r.object().contains("sliding_window") && !r.has("sliding_window");
  if (!null_window) {
    c.attention.sliding_window = r.integer("sliding_window", 4096);
    if (*c.attention.sliding_window <= 0)
      fail("'sliding_window' must be positive or null, got {} (transformers' mask would hide every key)",
           *c.attention.sliding_window);
  }
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, MlpSpec{c.intermediate_size});
  validate_decoder(c.spec);
  return c.spec;
}

}  // namespace

extern const Family kMistralFamily{"MistralForCausalLM", "mistral", describe, standard_decoder_parameters};

}  // namespace moetune::model
