// MinistralForCausalLM (Ministral-8B): Mistral's decoder whose layers slide where layer_types says (absent: every
// layer when sliding_window is set, as MinistralConfig fills it in), the mask over sliding_window. Defaults:
// transformers 5.17's MinistralConfig (sliding_window 4096, bos 1, eos 2).
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 32000,
                                            .hidden_size = 4096,
                                            .intermediate_size = 14336,
                                            .num_hidden_layers = 32,
                                            .num_key_value_heads = 8,
                                            .max_position_embeddings = 4096 * 32,
                                            .has_layer_types = true});
  apply_token_id_defaults(r, {.pad = std::nullopt, .bos = 1, .eos = 2}, c.spec);
  const std::optional<int64_t> window =
      r.is_null("sliding_window") ? std::nullopt : std::optional(r.integer("sliding_window", 4096));
  std::vector<std::string> types = r.strings("layer_types");
  if (types.empty()) types.assign(c.spec.layers.size(), window ? "sliding_attention" : "full_attention");
  build_dense_layers(c, windows_of_layer_types(types, window, c.spec.num_layers(), sliding_window_key(r)));
  return c.spec;
}

}  // namespace

extern const Family kMinistralFamily{"MinistralForCausalLM", "ministral", describe, standard_decoder_parameters};

}  // namespace moetune::model
