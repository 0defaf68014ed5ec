// LlamaForCausalLM: GQA attention with optional biases (attention_bias on q/k/v/o), SwiGLU MLP with optional
// biases (mlp_bias), llama3/linear RoPE scaling. Defaults: transformers v5's LlamaConfig.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 32000, .hidden_size = 4096, .intermediate_size = 11008,
                                            .num_hidden_layers = 32, .max_position_embeddings = 2048});
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  const MlpSpec mlp{c.intermediate_size, r.boolean("mlp_bias", false)};
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, mlp);
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kLlamaFamily{"LlamaForCausalLM", "llama", describe, standard_decoder_parameters};

}  // namespace moetune::model
