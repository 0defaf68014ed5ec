// Qwen3NextForCausalLM (Qwen3-Next-80B-A3B), Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM (Qwen3.5's language
// models, model_type qwen3_5_text / qwen3_5_moe_text), as transformers 5.17's modeling_qwen3_next, modeling_qwen3_5
// and modeling_qwen3_5_moe compute them:
// - layer_types (absent: every full_attention_interval-th layer, 4 by default, is full attention; the old names
//   mamba / attention / conv read as transformers remaps them) choose each layer's token mixer: a Gated DeltaNet
//   (linear_attention; model/gated_delta_mixer.h) or gated attention (full_attention: q_proj gives each head a query
//   and a gate, the output multiplied by sigmoid(gate); per-head q/k RMSNorm; RoPE on the first
//   partial_rotary_factor of each head, 0.25 by default; GQA; no sliding window);
// - then Qwen3-Next's MoE (Qwen2-MoE's: softmax top-k router, renormalised when norm_topk_prob (default true), SwiGLU
//   experts, a shared expert scaled by sigmoid(shared_expert_gate(x))) where mlp_only_layers / decoder_sparse_step
//   say, a dense SwiGLU MLP of intermediate_size elsewhere; Qwen3.5 a dense MLP on every layer; Qwen3.5-MoE the MoE
//   on every layer, its router always renormalising; the load-balancing loss when output_router_logits;
// - every RMSNorm but the Gated DeltaNet's gated one scales by 1 + weight (Qwen3NextRMSNorm is Gemma 3's);
// - Qwen3-Next stores the Gated DeltaNet's projections as in_proj_qkvz / in_proj_ba grouped per key head, Qwen3.5
//   as in_proj_qkv, in_proj_z, in_proj_b and in_proj_a (GatedDeltaSpec::grouped_projections);
// - Qwen3.5's multimodal RoPE (mrope_section) turns text positions exactly as plain RoPE does (the same position
//   on every axis), so its keys are read past;
// - multi-token-prediction tensors (mtp.*) skipped on load and not saved, as transformers ignores them.
// The Gated DeltaNet runs on the CPU engine only (model/device_support.h says so on the GPU). Defaults: transformers
// 5.17's Qwen3NextConfig, Qwen3_5TextConfig and Qwen3_5MoeTextConfig.
#include <fmt/format.h>

#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

// Qwen3NextRMSNorm: x̂ · (1 + weight).
constexpr float kNormOffset = 1.0f;

// Each layer's type, as Qwen3NextConfig.__post_init__ fills it: layer_types as written (legacy names remapped), else
// full attention every full_attention_interval-th layer.
std::vector<std::string> layer_types(const io::ConfigReader& r, int64_t num_layers) {
  std::vector<std::string> types = r.strings("layer_types");
  if (types.empty()) {
    const int64_t interval = r.integer("full_attention_interval", 4);
    if (interval == 0) fail("'full_attention_interval' must not be 0");
    for (int64_t layer = 0; layer < num_layers; ++layer)
      types.push_back((layer + 1) % interval != 0 ? "linear_attention" : "full_attention");
    return types;
  }
  if (int64_t(types.size()) != num_layers)
    fail("'layer_types' lists {} layers, 'num_hidden_layers' is {}", types.size(), num_layers);
  for (std::string& type : types) {
    if (type == "mamba" || type == "conv") type = "linear_attention";
    if (type == "attention") type = "full_attention";
    if (type != "linear_attention" && type != "full_attention")
      refuse("layer_types", type, "a Qwen3-Next layer other than linear_attention or full_attention");
  }
  return types;
}

GatedDeltaSpec read_gated_delta(const io::ConfigReader& r, double norm_eps) {
  GatedDeltaSpec g;
  g.num_k_heads = r.integer("linear_num_key_heads", 16);
  g.num_v_heads = r.integer("linear_num_value_heads", 32);
  g.k_head_dim = r.integer("linear_key_head_dim", 128);
  g.v_head_dim = r.integer("linear_value_head_dim", 128);
  g.conv_kernel = r.integer("linear_conv_kernel_dim", 4);
  g.norm_eps = norm_eps;
  return g;
}

// Where each architecture's layers take an MoE block.
enum class Ffn { QwenMoeRule, DenseEverywhere, MoeEverywhere };

struct Variant {
  DecoderDefaults defaults;
  Ffn ffn;
  bool grouped_projections;
  bool reads_norm_topk_prob;  // Qwen3.5-MoE's router renormalises always (its config has no such key)
};

MoeSpec read_moe(const io::ConfigReader& r, const Variant& v) {
  MoeSpec moe;
  moe.router.num_experts = r.integer("num_experts", v.ffn == Ffn::MoeEverywhere ? 256 : 512);
  moe.router.top_k = r.integer("num_experts_per_tok", v.ffn == Ffn::MoeEverywhere ? 8 : 10);
  moe.router.renormalize = !v.reads_norm_topk_prob || r.boolean("norm_topk_prob", true);
  moe.experts.intermediate = r.integer("moe_intermediate_size", 512);
  moe.shared_expert =
      SharedExpertSpec{MlpSpec{r.integer("shared_expert_intermediate_size", 512)}, /*sigmoid_gate=*/true};
  return moe;
}

// Attention, or a Gated DeltaNet where layer_types says, then the feed-forward the variant puts on each layer.
ModelSpec describe_variant(const io::ConfigReader& r, const Variant& v) {
  DecoderConfig c = read_decoder_config(r, v.defaults);
  // The Gated DeltaNet's conv applies hidden_act as its activation; the engine's conv runs SiLU.
  if (const std::string act = r.string("hidden_act", "silu"); act != "silu")
    refuse("hidden_act", act, "a Gated DeltaNet conv activation other than silu");
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  c.attention.qk_norm = true;
  c.attention.output_gate = true;
  const int64_t layers = c.spec.num_layers();
  const std::vector<std::optional<int64_t>> no_windows(static_cast<size_t>(layers));
  switch (v.ffn) {
    case Ffn::QwenMoeRule:
      build_qwen_moe_layers(r, c, read_moe(r, v), no_windows);
      break;
    case Ffn::DenseEverywhere:
      build_dense_layers(c, no_windows);
      break;
    case Ffn::MoeEverywhere: {
      const MoeSpec moe = read_moe(r, v);
      for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, moe);
      read_load_balancing_loss(r, c.spec);
      finish_decoder(c);
      break;
    }
  }
  const std::vector<std::string> types = layer_types(r, layers);
  GatedDeltaSpec gated_delta = read_gated_delta(r, c.spec.norm_eps);
  gated_delta.grouped_projections = v.grouped_projections;
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::vector<SublayerSpec>& sublayers = c.spec.layers[size_t(layer)].sublayers;
    if (types[size_t(layer)] == "linear_attention") sublayers[0].mixer = gated_delta;
    for (SublayerSpec& sublayer : sublayers) sublayer.norm_weight_offset = kNormOffset;
  }
  c.spec.final_norm_weight_offset = kNormOffset;
  c.spec.carries_mtp_layers = true;
  validate_decoder(c.spec);
  return c.spec;
}

// Qwen3NextConfig's defaults; Qwen3.5's text configs change the sizes.
constexpr DecoderDefaults kQwen3NextDefaults{.vocab_size = 151936,
                                             .hidden_size = 2048,
                                             .intermediate_size = 5632,
                                             .num_hidden_layers = 48,
                                             .num_attention_heads = 16,
                                             .num_key_value_heads = 2,
                                             .head_dim = 256,
                                             .max_position_embeddings = 32768,
                                             .has_layer_types = true,
                                             .partial_rotary_factor = 0.25};

ModelSpec describe_qwen3_next(const io::ConfigReader& r) {
  return describe_variant(r, {kQwen3NextDefaults, Ffn::QwenMoeRule, /*grouped_projections=*/true,
                              /*reads_norm_topk_prob=*/true});
}

ModelSpec describe_qwen3_5(const io::ConfigReader& r) {
  DecoderDefaults defaults = kQwen3NextDefaults;
  defaults.vocab_size = 248320;
  defaults.hidden_size = 4096;
  defaults.intermediate_size = 12288;
  defaults.num_hidden_layers = 32;
  defaults.num_key_value_heads = 4;
  return describe_variant(r, {defaults, Ffn::DenseEverywhere, /*grouped_projections=*/false,
                              /*reads_norm_topk_prob=*/false});
}

ModelSpec describe_qwen3_5_moe(const io::ConfigReader& r) {
  DecoderDefaults defaults = kQwen3NextDefaults;
  defaults.vocab_size = 248320;
  defaults.num_hidden_layers = 40;
  return describe_variant(r, {defaults, Ffn::MoeEverywhere, /*grouped_projections=*/false,
                              /*reads_norm_topk_prob=*/false});
}

}  // namespace

extern const Family kQwen3NextFamily{"Qwen3NextForCausalLM", "qwen3_next", describe_qwen3_next,
                                     standard_decoder_parameters};
extern const Family kQwen3_5Family{"Qwen3_5ForCausalLM", "qwen3_5_text", describe_qwen3_5, standard_decoder_parameters};
extern const Family kQwen3_5MoeFamily{"Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", describe_qwen3_5_moe,
                                      standard_decoder_parameters};

}  // namespace moetune::model
