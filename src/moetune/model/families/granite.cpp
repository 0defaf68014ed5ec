// IBM Granite's decoders as transformers 5.17's modeling_granite / modeling_granitemoe / modeling_granitemoeshared
// compute them: Llama's layers (Mixtral's for the MoE ones) with four multipliers of μP training —
// - embedding_multiplier: the embedding's rows times it (ModelSpec::embedding_scale, as the fp32 number: transformers
//   multiplies by a Python float, unlike Gemma's bf16 buffer);
// - attention_multiplier: the softmax scale itself (AttentionSpec::scaling; 1.0 when absent, not 1 / sqrt(d));
// - residual_multiplier: h + m · sublayer(h) for attention and the MLP / MoE alike (SublayerSpec::residual_scale);
// - logits_scaling: the LM head's logits divided by it (ModelSpec::logits_divisor).
// GraniteMoe: every layer MoE, a router without bias whose top-k logits are softmaxed among themselves (GPT-OSS's
// order), experts of intermediate_size stacked in block_sparse_moe.input_linear [E, 2I, H] (gate; up) and
// output_linear [E, H, I], the router in router.layer (transformers 5.17 saves those names and holds
// experts.gate_up_proj / experts.down_proj / router.weight in memory: both load); the load-balancing loss when
// output_router_logits. GraniteMoeShared adds an ungated shared MLP beside the MoE block, shared_mlp.input_linear
// [2S, H] (gate; up) and output_linear, of shared_intermediate_size (0: none), summed with the routed output before
// the residual multiplier. Defaults: transformers 5.17's GraniteConfig, GraniteMoeConfig, GraniteMoeSharedConfig.
// GraniteMoeHybrid (Granite 4.0, granite-4.0-h-tiny / small / micro): each layer's first sublayer Mamba2 or
// attention as layer_types (or its alias layers_block_type, old names mamba / attention) says, every layer
// Mamba2 by default; RoPE only where position_embedding_type is "rope"; the second sublayer GraniteMoe's MoE with
// the shared MLP always beside it, or that shared MLP alone (a dense layer) when num_local_experts is 0. Its Mamba2
// mixer is Nemotron-H's (model/mamba2_block.h) under mamba.*, with the gated norm over the whole width; the residual
// multiplier scales it too. Defaults: GraniteMoeHybridConfig.
// GraniteSWA / GraniteMoeSWA: Granite's / GraniteMoeShared's layers whose attention slides over sliding_window keys
// where layer_types says (every fourth layer from 0 full by default), rotates with its own theta from
// layer_rope_theta (0: no RoPE) and has a learned sink per head (GPT-OSS's sinks); GraniteMoeSWA saves v5's
// experts.gate_up_proj / down_proj and router.weight. Defaults: GraniteSWAConfig, GraniteMoeSWAConfig.
#include <cmath>

#include "moetune/core/error.h"
#include "moetune/model/families/decoder_config.h"
#include "moetune/model/families/decoder_parameters.h"
#include "moetune/model/families/family.h"

namespace moetune::model {
namespace {

// A multiplier's value: transformers multiplies (or divides) by whatever the config holds, so an explicit null
// fails there; refused here by key.
double multiplier(const io::ConfigReader& r, const char* key) {
  if (r.is_null(key)) refuse(key, "null", "a null multiplier (transformers multiplies by it)");
  return r.number(key, 1.0);
}

// GraniteConfig's defaults, which GraniteMoe's, GraniteMoeShared's, GraniteMoeHybrid's and GraniteMoeSWA's share.
constexpr DecoderDefaults kGraniteDefaults{.vocab_size = 32000,
                                           .hidden_size = 4096,
                                           .intermediate_size = 11008,
                                           .num_hidden_layers = 32,
                                           .max_position_embeddings = 2048};

DecoderConfig read_granite_config(const io::ConfigReader& r, const DecoderDefaults& defaults = kGraniteDefaults) {
  DecoderConfig c = read_decoder_config(r, defaults);
  c.attention.qkv_bias = c.attention.o_bias = r.boolean("attention_bias", false);
  c.attention.scaling = multiplier(r, "attention_multiplier");
  c.spec.embedding_scale = multiplier(r, "embedding_multiplier");
  c.spec.embedding_scale_in_activation_dtype = false;
  c.spec.logits_divisor = multiplier(r, "logits_scaling");
  if (c.spec.logits_divisor == 0.0) refuse("logits_scaling", "0", "logits divided by zero");
  return c;
}

// Every sublayer's output times residual_multiplier before the residual add; then the shared checks.
void finish_granite(const io::ConfigReader& r, DecoderConfig& c) {
  const double residual = multiplier(r, "residual_multiplier");
  for (LayerSpec& layer : c.spec.layers)
    for (SublayerSpec& sublayer : layer.sublayers) sublayer.residual_scale = residual;
  finish_decoder(c);
}

ModelSpec describe_granite(const io::ConfigReader& r) {
  DecoderConfig c = read_granite_config(r);
  const MlpSpec mlp{c.intermediate_size, r.boolean("mlp_bias", false)};
  for (LayerSpec& layer : c.spec.layers) layer = attention_then(c.attention, mlp);
  finish_granite(r, c);
  return c.spec;
}

MoeSpec read_granite_moe(const io::ConfigReader& r, const DecoderConfig& c) {
  MoeSpec moe;
  moe.router.num_experts = r.integer("num_local_experts", 8);
  moe.router.top_k = r.integer("num_experts_per_tok", 2);
  moe.router.topk_before_softmax = true;
  moe.experts.intermediate = c.intermediate_size;
  return moe;
}

// GraniteSWA / GraniteMoeSWA: each layer's window (sliding_attention layers; every fourth layer from 0 full by
// default), its RoPE theta from layer_rope_theta (0: none; default the global one) and a learned softmax sink per
// head (GPT-OSS's: transformers scales the output by sigmoid(logsumexp - sink)). Each layer gets its own attention.
std::vector<AttentionSpec> granite_swa_attention(const io::ConfigReader& r, const DecoderConfig& c) {
  const int64_t layers = c.spec.num_layers();
  std::vector<std::string> types;
  if (r.has("layer_types")) {
    types = r.strings("layer_types");
  } else {
    for (int64_t i = 0; i < layers; ++i) types.push_back(i % 4 == 0 ? "full_attention" : "sliding_attention");
  }
  // GraniteSWAConfig's window is 128 when absent; an explicit null leaves sliding layers without one (refused there).
  const std::optional<int64_t> window =
      r.is_null("sliding_window") ? std::nullopt : std::optional<int64_t>(r.integer("sliding_window", 128));
  const std::vector<std::optional<int64_t>> windows =
      windows_of_layer_types(types, window, layers, sliding_window_key(r));
  std::vector<double> thetas(size_t(layers), c.attention.rope.theta);
  if (const nlohmann::json* given = r.find("layer_rope_theta")) {
    if (!given->is_array() || int64_t(given->size()) != layers)
      fail("'layer_rope_theta' must list one theta per layer ({}), got {}", layers, given->dump().substr(0, 100));
    for (size_t i = 0; i < thetas.size(); ++i) thetas[i] = io::ConfigReader::as_number((*given)[i], "layer_rope_theta");
  }
  std::vector<AttentionSpec> out;
  for (int64_t i = 0; i < layers; ++i) {
    AttentionSpec a = c.attention;
    a.sinks = true;
    a.sliding_window = windows[size_t(i)];
    if (thetas[size_t(i)] == 0.0) {
      a.rope = ops::RopeSpec{.type = "none"};
    } else {
      a.rope.theta = thetas[size_t(i)];
    }
    out.push_back(a);
  }
  return out;
}

// GraniteMoe's layers; GraniteMoeShared's with the shared MLP beside the block; GraniteMoeSWA's (the shared MLP too)
// with each layer's own window, RoPE and sinks.
ModelSpec describe_granite_moe(const io::ConfigReader& r, bool shared_mlp, bool sliding) {
  DecoderConfig c = read_granite_config(r);
  MoeSpec moe = read_granite_moe(r, c);
  if (shared_mlp) {
    const int64_t shared = r.integer("shared_intermediate_size", 0);
    if (shared < 0) fail("'shared_intermediate_size' must not be negative, got {}", shared);
    if (shared > 0) moe.shared_expert = SharedExpertSpec{MlpSpec{shared}};
  }
  const std::vector<AttentionSpec> attention =
      sliding ? granite_swa_attention(r, c) : std::vector<AttentionSpec>(c.spec.layers.size(), c.attention);
  for (size_t i = 0; i < c.spec.layers.size(); ++i) c.spec.layers[i] = attention_then(attention[i], moe);
  read_load_balancing_loss(r, c.spec);
  finish_granite(r, c);
  return c.spec;
}

ModelSpec describe_granite_moe(const io::ConfigReader& r) { return describe_granite_moe(r, false, false); }
ModelSpec describe_granite_moe_shared(const io::ConfigReader& r) { return describe_granite_moe(r, true, false); }
ModelSpec describe_granite_moe_swa(const io::ConfigReader& r) { return describe_granite_moe(r, true, true); }

MoeTensorNames granite_moe_names() {
  MoeTensorNames names;
  names.block = names.fused_block = "block_sparse_moe";
  names.router = "router.layer";
  names.fused_router = "router";
  names.stacked_gate_up = "input_linear.weight";
  names.stacked_down = "output_linear.weight";
  names.shared_expert = "shared_mlp";
  names.shared_expert_beside_block = true;
  names.shared_expert_gate_up = "input_linear";
  names.shared_expert_down = "output_linear";
  return names;
}

std::vector<ParameterSpec> granite_moe_parameters(const ModelSpec& spec) {
  return decoder_parameters(spec, granite_moe_names());
}

// GraniteMoeHybridMambaLayer's settings, as GraniteMoeHybridConfig derives them.
Mamba2Spec read_granite_mamba(const io::ConfigReader& r, int64_t hidden_size, double eps) {
  Mamba2Spec m;
  m.num_heads = r.integer("mamba_n_heads", 128);
  const int64_t inner = r.integer("mamba_expand", 2) * hidden_size;
  if (m.num_heads <= 0 || inner <= 0 || inner % m.num_heads != 0)
    fail("'mamba_n_heads' {} must divide mamba_expand · hidden_size = {}", m.num_heads, inner);
  if (const nlohmann::json* d = r.find("mamba_d_head"); d && !(d->is_string() && d->get<std::string>() == "auto"))
    m.head_dim = io::ConfigReader::as_integer(*d, "mamba_d_head");
  else
    m.head_dim = inner / m.num_heads;  // "auto"
  if (m.head_dim * m.num_heads != inner)
    fail("'mamba_d_head' {} times mamba_n_heads {} is not mamba_expand · hidden_size = {}", m.head_dim, m.num_heads,
         inner);
  m.num_groups = r.integer("mamba_n_groups", 1);
  if (m.num_groups <= 0 || m.num_heads % m.num_groups != 0)
    fail("'mamba_n_groups' {} must divide mamba_n_heads {}", m.num_groups, m.num_heads);
  m.state_size = r.integer("mamba_d_state", 256);
  m.conv_kernel = r.integer("mamba_d_conv", 4);
  m.conv_bias = r.boolean("mamba_conv_bias", true);
  m.proj_bias = r.boolean("mamba_proj_bias", false);
  m.chunk_size = r.integer("mamba_chunk_size", 256);
  m.norm_eps = eps;  // GraniteMoeHybridMambaLayer's layer_norm_epsilon is rms_norm_eps
  m.norm_per_group = false;
  // dt is clamped to time_step_limit in the scan (transformers indexes it: null fails there).
  if (r.is_null("time_step_limit")) refuse("time_step_limit", "null", "a null dt limit (transformers indexes it)");
  m.dt_min = 0.0;
  m.dt_max = INFINITY;
  if (const nlohmann::json* limit = r.find("time_step_limit")) {
    if (!limit->is_array() || limit->size() != 2)
      fail("'time_step_limit' must be a list of two numbers, got {}", limit->dump().substr(0, 100));
    m.dt_min = io::ConfigReader::as_number((*limit)[0], "time_step_limit");
    m.dt_max = io::ConfigReader::as_number((*limit)[1], "time_step_limit");
  }
  return m;
}

// Each layer's first sublayer, Mamba2 (true) or attention, from layer_types (winning over its alias
// layers_block_type, as transformers applies it last) with the old names mamba / attention read as transformers
// remaps them; every layer Mamba2 when neither is set.
std::vector<bool> granite_mamba_layers(const io::ConfigReader& r, int64_t num_layers) {
  const char* key = r.has("layer_types") ? "layer_types" : r.has("layers_block_type") ? "layers_block_type" : nullptr;
  if (!key) return std::vector<bool>(size_t(num_layers), true);
  const std::vector<std::string> types = r.strings(key);
  if (int64_t(types.size()) != num_layers)
    fail("'{}' lists {} layers, but num_hidden_layers is {}", key, types.size(), num_layers);
  std::vector<bool> mamba;
  for (const std::string& type : types) {
    if (type != "linear_attention" && type != "mamba" && type != "full_attention" && type != "attention")
      fail("'{}' holds '{}': GraniteMoeHybrid's layers are linear_attention (mamba) or full_attention (attention)", key,
           type.substr(0, 100));
    mamba.push_back(type == "linear_attention" || type == "mamba");
  }
  return mamba;
}

ModelSpec describe_granite_hybrid(const io::ConfigReader& r) {
  DecoderConfig c = read_granite_config(r);
  // GraniteMoeHybridModel builds its rotary embedding only for position_embedding_type "rope" (default: none).
  if (r.string("position_embedding_type", "") != "rope") c.attention.rope = ops::RopeSpec{.type = "none"};
  const Mamba2Spec mamba = read_granite_mamba(r, c.spec.hidden_size, c.spec.norm_eps);
  const int64_t shared = r.integer("shared_intermediate_size", 1024);
  if (shared <= 0)
    fail("'shared_intermediate_size' must be positive (the shared MLP is on every layer), got {}", shared);
  const MlpSpec shared_mlp{shared};
  decltype(SublayerSpec::mixer) ffn = shared_mlp;
  const int64_t experts = r.integer("num_local_experts", 8);
  if (experts > 0) {
    MoeSpec moe = read_granite_moe(r, c);
    moe.shared_expert = SharedExpertSpec{shared_mlp};
    ffn = moe;
  }
  const std::vector<bool> mamba_layers = granite_mamba_layers(r, c.spec.num_layers());
  for (size_t i = 0; i < c.spec.layers.size(); ++i) {
    c.spec.layers[i] = attention_then(c.attention, ffn);
    if (mamba_layers[i]) c.spec.layers[i].sublayers[0].mixer = mamba;
  }
  if (experts > 0) read_load_balancing_loss(r, c.spec);
  finish_granite(r, c);
  return c.spec;
}

ModelSpec describe_granite_swa(const io::ConfigReader& r) {
  DecoderConfig c = read_granite_config(r, {.vocab_size = 100352,
                                            .hidden_size = 2560,
                                            .intermediate_size = 8192,
                                            .num_hidden_layers = 24,
                                            .num_attention_heads = 20,
                                            .num_key_value_heads = 4,
                                            .max_position_embeddings = 8192,
                                            .rms_norm_eps = 1e-5});
  // GraniteSWAConfig ties by default and names one id for both ends.
  c.spec.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  apply_token_id_defaults(r, {.bos = 100257, .eos = 100257}, c.spec);
  const MlpSpec mlp{c.intermediate_size, r.boolean("mlp_bias", false)};
  const std::vector<AttentionSpec> attention = granite_swa_attention(r, c);
  for (size_t i = 0; i < c.spec.layers.size(); ++i) c.spec.layers[i] = attention_then(attention[i], mlp);
  finish_granite(r, c);
  return c.spec;
}

// GraniteMoeSWA saves v5's names for the experts and the router (transformers has no renaming for it).
std::vector<ParameterSpec> granite_moe_swa_parameters(const ModelSpec& spec) {
  MoeTensorNames names = granite_moe_names();
  names.router = "router";
  names.fused_router.clear();
  names.stacked_gate_up = "experts.gate_up_proj";
  names.stacked_down = "experts.down_proj";
  return decoder_parameters(spec, names);
}

std::vector<ParameterSpec> granite_hybrid_parameters(const ModelSpec& spec) {
  return decoder_parameters(spec, granite_moe_names(),
                            {.gate_up = "input_linear", .mlp = "shared_mlp", .down = "output_linear"});
}

}  // namespace

extern const Family kGraniteFamily{"GraniteForCausalLM", "granite", describe_granite, standard_decoder_parameters};
extern const Family kGraniteMoeFamily{"GraniteMoeForCausalLM", "granitemoe", describe_granite_moe,
                                      granite_moe_parameters};
extern const Family kGraniteMoeSharedFamily{"GraniteMoeSharedForCausalLM", "granitemoeshared",
                                            describe_granite_moe_shared, granite_moe_parameters};
extern const Family kGraniteSwaFamily{"GraniteSWAForCausalLM", "granite_swa", describe_granite_swa,
                                      standard_decoder_parameters};
extern const Family kGraniteMoeSwaFamily{"GraniteMoeSWAForCausalLM", "granitemoe_swa", describe_granite_moe_swa,
                                         granite_moe_swa_parameters};
extern const Family kGraniteMoeHybridFamily{"GraniteMoeHybridForCausalLM", "granitemoehybrid", describe_granite_hybrid,
                                            granite_hybrid_parameters};

}  // namespace moetune::model
