// ArceeForCausalLM (Arcee's AFM-4.5B; model_type arcee), as transformers 5.17's modeling_arcee computes it: Llama's
// attention (biases with attention_bias, head_dim from config.json else hidden / heads) and an MLP without a gate,
// down_proj(act(up_proj(x))), whose act is hidden_act: "relu2" (relu(x)², ArceeConfig's default and the released
// model's) is the engine's relu² MLP, Nemotron-H's; any other is refused by key. Biases on up / down with mlp_bias.
// Defaults: transformers 5.17's ArceeConfig.
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 32000,
                                            .hidden_size = 2560,
                                            .intermediate_size = 18432,
                                            .num_hidden_layers = 32,
                                            .max_position_embeddings = 4096,
                                            .rms_norm_eps = 1e-5,
                                            .reads_hidden_act = false});
  if (const std::string act = r.string("hidden_act", "relu2"); act != "relu2")
    refuse("hidden_act", act, "an ungated MLP activation other than relu2");
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  const MlpSpec mlp = relu2_mlp(c.intermediate_size, r.boolean("mlp_bias", false));
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, mlp);
  finish_decoder(c);
  return c.spec;
}

}  // namespace

extern const Family kArceeFamily{"ArceeForCausalLM", "arcee", describe, standard_decoder_parameters};

}  // namespace moetune::model
