// GptOssForCausalLM (gpt-oss-20b / -120b): GQA attention with biases on q/k/v/o and a learned sink logit per head;
// layers alternate sliding_attention (a window of sliding_window keys) and full_attention as layer_types say; YaRN
// RoPE. Every layer is MoE: a linear router with a bias whose top-k logits are softmaxed among themselves, experts
// with biases and a clamped SwiGLU, stored fused and transposed with gate/up interleaved (mlp.experts.gate_up_proj
// [E, H, 2I], down_proj [E, I, H]); the released checkpoints hold those as MXFP4, which loading dequantizes
// (model/mxfp4.h). The load-balancing loss when output_router_logits. Defaults: transformers v5's GptOssConfig.
#include <algorithm>

#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

using nlohmann::json;

// GptOssConfig.__post_init__'s RoPE when config.json has none.
const json kDefaultRope = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                           {"truncate", false}, {"original_max_position_embeddings", 4096}};

// layer_types as listed, else GptOssConfig's: even layers slide, odd ones attend fully.
std::vector<bool> sliding_layers(const io::ConfigReader& r, int64_t num_layers) {
  const std::vector<std::string> types = r.strings("layer_types");
  if (!types.empty() && int64_t(types.size()) != num_layers)
    fail("'layer_types' must list one type per layer ({}), got {}", num_layers, types.size());
  std::vector<bool> sliding(static_cast<size_t>(num_layers));
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    if (types.empty()) {
      sliding[size_t(layer)] = layer % 2 == 0;
      continue;
    }
    const std::string& type = types[size_t(layer)];
    if (type != "sliding_attention" && type != "full_attention")
      fail("'layer_types' holds '{}', not a layer type GPT-OSS has", type.substr(0, 100));
    sliding[size_t(layer)] = type == "sliding_attention";
  }
  return sliding;
}

// The released checkpoints store the experts as MXFP4, which loading dequantizes; other quantizations are refused.
void check_quantization(const io::ConfigReader& r) {
  const json* quantization = r.find("quantization_config");
  if (!quantization) return;
  if (!quantization->is_object()) fail("'quantization_config' must be an object");
  const std::string method = io::ConfigReader(*quantization).string("quant_method", "");
  if (method != "mxfp4") refuse("quantization_config", "quant_method '" + method + "'", "a quantization other than MXFP4");
}

ModelSpec describe(const io::ConfigReader& r) {
  DecoderConfig c = read_decoder_config(r, {.vocab_size = 201088, .hidden_size = 2880, .intermediate_size = 2880,
                                            .num_hidden_layers = 36, .num_attention_heads = 64,
                                            .num_key_value_heads = 8, .head_dim = 64,
                                            .max_position_embeddings = 131072, .rms_norm_eps = 1e-5,
                                            .rope_theta = 150000.0, .rope_parameters = kDefaultRope,
                                            .has_layer_types = true, .reads_hidden_act = false});
  check_quantization(r);
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", true);
  c.attention.sinks = true;
  const int64_t window = r.integer("sliding_window", 128);

  MoeSpec moe;
  // attribute_map {"num_experts": "num_local_experts"}: the alias, set after the field, wins.
  moe.router.num_experts = r.integer("num_experts", r.integer("num_local_experts", 128));
  moe.router.top_k = r.integer("num_experts_per_tok", 4);
  moe.router.topk_before_softmax = true;
  moe.router.bias = true;
  moe.experts.intermediate = c.intermediate_size;
  moe.experts.bias = true;
  // GptOssExperts hard-codes alpha 1.702 and limit 7 (config.json's swiglu_limit is read only by the MXFP4
  // kernels' path, which training does not take), so these are the constants, whatever the config says.
  moe.experts.activation = Activation::ClampedSwiGLU;
  moe.experts.clamp = ops::SwigluClamp{1.702f, 7.0f};

  const std::vector<bool> sliding = sliding_layers(r, c.spec.num_layers());
  // Read only by the sliding layers: with none (every layer full_attention) any value goes, as in transformers.
  if (window <= 0 && std::find(sliding.begin(), sliding.end(), true) != sliding.end())
    fail("'sliding_window' must be positive where a layer slides, got {}", window);
  for (size_t layer = 0; layer < sliding.size(); ++layer) {
    AttentionSpec attention = c.attention;
    if (sliding[layer]) attention.sliding_window = window;
    c.spec.layers[layer] = attention_then(attention, moe);
  }
  read_load_balancing_loss(r, c.spec);
  validate_decoder(c.spec);
  return c.spec;
}

std::vector<ParameterSpec> parameters(const ModelSpec& spec) {
  MoeTensorNames names;
  names.router = "router";
  names.transposed_fused_experts = true;
  return decoder_parameters(spec, names);
}

}  // namespace

extern const Family kGptOssFamily{"GptOssForCausalLM", "gpt_oss", describe, parameters};

}  // namespace moetune::model
