#include "moetune/model/families/decoder_config.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "moetune/core/error.h"

namespace moetune::model {
namespace {

using nlohmann::json;

// Sizes beyond these are typos or hostile files, not models: refusing them early avoids allocating for minutes.
constexpr int64_t kMaxLayers = 1 << 12, kMaxExperts = 1 << 16, kMaxWidth = 1 << 20, kMaxVocab = int64_t(1) << 26;

void require_in_range(int64_t value, const char* key, int64_t most) {
  if (value <= 0) fail("'{}' must be positive, got {}", key, value);
  if (value > most) fail("'{}' is {}, more than moetune accepts ({})", key, value, most);
}

// v5 writes rope_parameters = {rope_type, rope_theta, ...}; v4 writes rope_theta beside an optional
// rope_scaling = {type or rope_type, factor, ...}. Values inside the dict win over top-level ones. A family
// whose config class fills in a RoPE dict when there is none (GPT-OSS: yarn) passes it in DecoderDefaults.
// longrope's keys as transformers' _compute_longrope_parameters reads them: short_factor and long_factor (one value
// per frequency; head_dim is checked where the frequencies are made), original_max_position_embeddings (required:
// the dict's, or the top level's as standardize_rope_params copies Phi-3's in), factor (absent or null:
// max_position_embeddings / original), attention_factor (optional).
void read_longrope(const json& dict, const io::ConfigReader& top, int64_t max_position_embeddings,
                   ops::RopeSpec& rope) {
  for (const char* name : {"short_factor", "long_factor"}) {
    const json* factors = dict.contains(name) ? &dict.at(name) : nullptr;
    if (!factors || !factors->is_array() || factors->empty() ||
        !std::all_of(factors->begin(), factors->end(),
                     [](const json& v) { return v.is_number() && v.get<double>() > 0; }))
      fail("RoPE longrope needs '{}': a list of positive numbers, one per rotary frequency", name);
    std::vector<double>& values = std::string_view(name) == "short_factor" ? rope.short_factor : rope.long_factor;
    for (const json& v : *factors) values.push_back(v.get<double>());
    if (values.size() != rope.short_factor.size())
      fail("RoPE longrope's 'long_factor' has {} values and 'short_factor' {}", factors->size(),
           rope.short_factor.size());
  }
  if (!dict.contains("original_max_position_embeddings") && !top.has("original_max_position_embeddings"))
    fail("RoPE longrope needs 'original_max_position_embeddings' (transformers reads it from the RoPE parameters)");
  if (rope.original_max_position_embeddings <= 1)
    fail("RoPE longrope's 'original_max_position_embeddings' must exceed 1, got {}",
         rope.original_max_position_embeddings);
  if (!dict.contains("factor") || dict["factor"].is_null())
    rope.factor = double(max_position_embeddings) / double(rope.original_max_position_embeddings);
}

ops::RopeSpec read_rope(const io::ConfigReader& top, int64_t max_position_embeddings, const DecoderDefaults& d) {
  const char* key = rope_dict_key(top);
  const json* parameters = top.find(key);
  json dict = parameters ? *parameters : d.rope_parameters.value_or(json::object());
  if (!dict.is_object()) fail("'{}' must be an object", key);
  // Per-layer-type RoPE ({"full_attention": {...}, "sliding_attention": {...}}): one set must serve all. A config
  // class without layer_types reads such a dict as one global dict of unknown keys, i.e. default RoPE at the
  // top-level rope_theta (transformers' standardize_rope_params): surely not what the file meant, so refused.
  if (dict.contains("full_attention") && dict["full_attention"].is_object()) {
    if (!d.has_layer_types && !top.has("layer_types"))
      refuse(key, "a dict per layer type", "per-layer-type RoPE for a family without layer_types (transformers would "
             "ignore it and run default RoPE)");
    json first = dict["full_attention"];
    for (auto& [layer_type, value] : dict.items())
      if (value != first) refuse(key, layer_type, "RoPE that differs between layer types");
    dict = first;
  }
  return read_rope_dict(dict, key, top, max_position_embeddings, d);
}

}  // namespace

ops::RopeSpec read_rope_dict(const json& dict, const char* key, const io::ConfigReader& top,
                             int64_t max_position_embeddings, const DecoderDefaults& d) {
  io::ConfigReader reader(dict);
  ops::RopeSpec rope;
  rope.type = reader.string("rope_type", reader.string("type", "default"));
  rope.theta = reader.number("rope_theta", top.number("rope_theta", d.rope_theta));
  rope.factor = reader.number("factor", 1.0);
  rope.low_freq_factor = reader.number("low_freq_factor", 1.0);
  rope.high_freq_factor = reader.number("high_freq_factor", 4.0);
  // transformers' standardize_rope_params: for the scaled schedules a top-level value wins over the dict's.
  rope.original_max_position_embeddings = top.integer(
      "original_max_position_embeddings", reader.integer("original_max_position_embeddings", max_position_embeddings));
  rope.partial_rotary_factor = reader.number(
      "partial_rotary_factor", top.number("partial_rotary_factor", d.partial_rotary_factor.value_or(1.0)));
  // yarn: `beta_fast or 32` in transformers, so 0 means the default too; truncate defaults to true there.
  rope.beta_fast = reader.number("beta_fast", 0.0) != 0.0 ? reader.number("beta_fast", 0.0) : 32.0;
  rope.beta_slow = reader.number("beta_slow", 0.0) != 0.0 ? reader.number("beta_slow", 0.0) : 1.0;
  rope.truncate = reader.truthy("truncate", true);  // `.get("truncate", True)`: an explicit null is falsy
  if (reader.has("attention_factor")) rope.attention_factor = reader.number("attention_factor", 1.0);
  rope.mscale = reader.number("mscale", 0.0);
  rope.mscale_all_dim = reader.number("mscale_all_dim", 0.0);
  // _compute_yarn_parameters: `if factor is None: factor = max_position_embeddings / original_max_position_embeddings`
  // (an explicit null; an absent key fails transformers' validation).
  if (rope.type == "yarn" && dict.contains("factor") && dict["factor"].is_null() && rope.original_max_position_embeddings > 0)
    rope.factor = double(max_position_embeddings) / double(rope.original_max_position_embeddings);
  // dynamic (NTK) RoPE starts from the base rescaled for max_position_embeddings, which is the base itself, and
  // rescales only when a position reaches max_position_embeddings: default RoPE below that (the model refuses
  // positions beyond it, model/sequence_layout.h).
  const bool known = rope.type == "default" || rope.type == "linear" || rope.type == "llama3" || rope.type == "yarn" ||
                     rope.type == "dynamic" || rope.type == "longrope";
  if (!known)
    refuse(key, "rope_type " + rope.type,
           "a RoPE schedule other than default, dynamic, linear, llama3, yarn and longrope");
  if (rope.type == "longrope") read_longrope(dict, top, max_position_embeddings, rope);
  // Most families' default RoPE rotates the whole head_dim whatever partial_rotary_factor says (their
  // compute_default_rope_parameters never read it); GLM-4-MoE's and Phi-3's rotate that share of each head
  // (DecoderDefaults::partial_rotary_factor). In those families longrope shortens its frequencies by it and scales
  // the rotating pairs' cos and sin (Phi-4-mini), as the engine does; the other scaled schedules, and longrope where
  // the attention rotates whole heads (transformers fails there), are refused.
  if (rope.type == "default" && !d.partial_rotary_factor) rope.partial_rotary_factor = 1.0;
  const bool partial_schedule = rope.type == "default" || (rope.type == "longrope" && d.partial_rotary_factor);
  if (rope.partial_rotary_factor != 1.0 && !partial_schedule)
    refuse("partial_rotary_factor", fmt::format("{} with rope_type {}", rope.partial_rotary_factor, rope.type),
           "partial RoPE on a scaled schedule other than longrope in Phi-3 / GLM-4-MoE");
  if (!(rope.partial_rotary_factor > 0 && rope.partial_rotary_factor <= 1))
    fail("'partial_rotary_factor' must be in (0, 1], got {}", rope.partial_rotary_factor);
  if (!(rope.theta > 0)) fail("'rope_theta' must be positive, got {}", rope.theta);
  if (rope.type != "default" && !(rope.factor > 0)) fail("RoPE 'factor' must be positive, got {}", rope.factor);
  if (rope.type == "yarn" && rope.original_max_position_embeddings <= 0)
    fail("RoPE 'original_max_position_embeddings' must be positive for yarn, got {}", rope.original_max_position_embeddings);
  return rope;
}

void refuse(const char* key, const std::string& value, const std::string& feature) {
  fail("'{}' is {}: {} is not implemented in moetune yet (training without it would not match transformers)", key,
       value.substr(0, 100), feature);
}

DecoderConfig read_decoder_config(const io::ConfigReader& r, const DecoderDefaults& d) {
  DecoderConfig out;
  ModelSpec& spec = out.spec;
  spec.vocab_size = r.integer("vocab_size", d.vocab_size);
  spec.hidden_size = r.integer("hidden_size", d.hidden_size);
  out.intermediate_size = r.integer("intermediate_size", d.intermediate_size);
  const int64_t layers = r.integer("num_hidden_layers", d.num_hidden_layers);
  require_in_range(spec.vocab_size, "vocab_size", kMaxVocab);
  require_in_range(spec.hidden_size, "hidden_size", kMaxWidth);
  require_in_range(layers, "num_hidden_layers", kMaxLayers);
  spec.layers.resize(size_t(layers));
  spec.max_position_embeddings = r.integer("max_position_embeddings", d.max_position_embeddings);
  spec.norm_eps = r.number("rms_norm_eps", d.rms_norm_eps);
  if (!(spec.norm_eps > 0)) fail("'rms_norm_eps' must be positive, got {}", spec.norm_eps);
  spec.tie_word_embeddings = r.boolean("tie_word_embeddings", false);

  AttentionSpec& a = out.attention;
  a.num_heads = r.integer("num_attention_heads", d.num_attention_heads);
  require_in_range(a.num_heads, "num_attention_heads", kMaxWidth);
  // Absent: the family's default; an explicit null: the heads (the config classes' __post_init__), not the default.
  a.num_kv_heads = r.is_null("num_key_value_heads") ? a.num_heads : r.integer("num_key_value_heads", d.num_key_value_heads.value_or(a.num_heads));
  require_in_range(a.num_kv_heads, "num_key_value_heads", kMaxWidth);
  if (a.num_heads % a.num_kv_heads != 0 && !d.per_head_kv)
    fail("'num_attention_heads' ({}) must be a multiple of 'num_key_value_heads' ({})", a.num_heads, a.num_kv_heads);
  a.qk_head_dim = a.v_head_dim = r.integer("head_dim", d.head_dim.value_or(spec.hidden_size / a.num_heads));
  require_in_range(a.qk_head_dim, "head_dim", kMaxWidth);
  if (a.qk_head_dim % 2 != 0) fail("'head_dim' must be even for RoPE, got {}", a.qk_head_dim);
  a.rope = read_rope(r, spec.max_position_embeddings, d);
  if (int64_t(double(a.qk_head_dim) * a.rope.partial_rotary_factor) < 1)
    fail("'partial_rotary_factor' {} rotates none of head_dim {}'s dimensions", a.rope.partial_rotary_factor,
         a.qk_head_dim);

  if (d.reads_hidden_act) {
    const std::string act = r.string(d.hidden_act_key, d.hidden_act_default);
    const std::optional<ops::GateFunction> gate = ops::gate_function_for_hidden_act(act);
    if (!gate)
      refuse(d.hidden_act_key, act,
             "an MLP activation other than silu / swish, gelu, gelu_new / gelu_pytorch_tanh / gelu_fast, quick_gelu "
             "and relu");
    out.gate = *gate;
  }
  if (double p = r.number("attention_dropout", 0.0); p != 0.0)
    refuse("attention_dropout", fmt::format("{}", p), "attention dropout");
  // masking_utils' create_causal_mask: a config with is_causal false attends both ways (a "power feature").
  if (!r.truthy("is_causal", true)) refuse("is_causal", "false", "bidirectional attention in a causal LM");
  // pretraining_tp is left alone: transformers 5.17's decoders never read it (v4's Llama sliced its
  // projections by it; the result was the same product).

  read_dtype_and_token_ids(r, spec);
  spec.embedding_padding_idx = embedding_padding_row(spec.pad_token_id, spec.vocab_size);
  return out;
}

LayerTypeRopes read_layer_type_ropes(const io::ConfigReader& r, const LayerTypeRopeDefaults& d, const char* family) {
  const json default_rope = {{"rope_type", "default"}};
  const json* given = r.find("rope_parameters");
  if (given && !given->is_null() && !given->is_object()) fail("'rope_parameters' must be an object");
  if (given && given->is_object() && !given->empty() && !given->contains("full_attention") &&
      !given->contains("sliding_attention"))
    refuse("rope_parameters", "one dict for every layer",
           fmt::format("{}'s RoPE outside its per-layer-type dicts (its config class ignores such a dict and runs "
                       "default RoPE)",
                       family));
  LayerTypeRopes ropes{default_rope, default_rope};
  if (given && given->is_object() && given->contains("full_attention") && !(*given)["full_attention"].is_null())
    ropes.full = (*given)["full_attention"];
  if (given && given->is_object() && given->contains("sliding_attention") && !(*given)["sliding_attention"].is_null())
    ropes.sliding = (*given)["sliding_attention"];
  if (const json* scaling = r.find("rope_scaling"); scaling && scaling->is_object() && !scaling->empty())
    ropes.full.update(*scaling);
  for (json* dict : {&ropes.full, &ropes.sliding})
    if (!dict->is_object()) fail("'rope_parameters' holds a layer type's RoPE that is not an object: {}", dict->dump());
  if (!ropes.full.contains("rope_theta")) ropes.full["rope_theta"] = r.number("rope_theta", d.full_theta);
  if (!ropes.sliding.contains("rope_theta"))
    ropes.sliding["rope_theta"] =
        d.sliding_theta_key ? r.number(d.sliding_theta_key, d.sliding_theta) : d.sliding_theta;
  return ropes;
}

const char* rope_dict_key(const io::ConfigReader& r) {
  // transformers' convert_rope_params_to_dict: `rope_scaling or rope_parameters`, so a non-empty rope_scaling wins
  // (an empty dict or false falls through to rope_parameters, as Python's `or` does).
  const json* scaling = r.find("rope_scaling");
  const bool falsy = scaling && ((scaling->is_object() && scaling->empty()) || (scaling->is_boolean() && !scaling->get<bool>()));
  return scaling && !falsy ? "rope_scaling" : "rope_parameters";
}

void apply_token_id_defaults(const io::ConfigReader& r, const TokenIdDefaults& ids, ModelSpec& spec) {
  const auto absent = [&](const char* key) { return !r.has(key) && !r.is_null(key); };
  if (absent("pad_token_id")) spec.pad_token_id = ids.pad;
  if (absent("bos_token_id")) spec.bos_token_id = ids.bos;
  if (absent("eos_token_id") && ids.eos) spec.eos_token_ids = {*ids.eos};
  spec.embedding_padding_idx = embedding_padding_row(spec.pad_token_id, spec.vocab_size);
}

std::optional<int64_t> embedding_padding_row(std::optional<int64_t> pad_token_id, int64_t vocab_size) {
  if (!pad_token_id) return std::nullopt;
  // nn.Embedding's padding_idx: a negative index counts from the end; one outside the table is refused there too.
  const int64_t row = *pad_token_id < 0 ? vocab_size + *pad_token_id : *pad_token_id;
  if (row < 0 || row >= vocab_size)
    fail("'pad_token_id' is {}, outside the vocabulary of {} (transformers' nn.Embedding refuses it as padding_idx)",
         *pad_token_id, vocab_size);
  return row;
}

void read_dtype_and_token_ids(const io::ConfigReader& r, ModelSpec& spec) {
  const std::string dtype_text = r.string("dtype", r.string("torch_dtype", ""));
  if (!dtype_text.empty()) {
    spec.dtype = dtype_from_torch_name(dtype_text);
    if (!spec.dtype) fail("'dtype' is '{}', not a torch dtype moetune knows", dtype_text.substr(0, 100));
  }
  spec.bos_token_id = r.optional_integer("bos_token_id");
  spec.pad_token_id = r.optional_integer("pad_token_id");
  spec.eos_token_ids = r.integers("eos_token_id");
}

MlpSpec relu2_mlp(int64_t intermediate, bool bias) {
  MlpSpec m{intermediate, bias};
  m.activation = Activation::ReluSquared;
  return m;
}

LayerSpec attention_then(const AttentionSpec& attention, decltype(SublayerSpec::mixer) ffn) {
  return LayerSpec{{SublayerSpec{"input_norm", attention}, SublayerSpec{"post_attn_norm", std::move(ffn)}}};
}

LayerSpec attention_then_output_normed(const AttentionSpec& attention, decltype(SublayerSpec::mixer) ffn) {
  return LayerSpec{{SublayerSpec{"", attention, "attn_out_norm"}, SublayerSpec{"", std::move(ffn), "mlp_out_norm"}}};
}

MoeSpec read_olmoe_moe(const io::ConfigReader& r, int64_t intermediate_size, int64_t default_experts,
                       int64_t default_top_k) {
  MoeSpec moe;
  moe.router.num_experts = r.integer("num_experts", r.integer("num_local_experts", default_experts));
  moe.router.top_k = r.integer("num_experts_per_tok", default_top_k);
  moe.router.renormalize = r.boolean("norm_topk_prob", false);
  moe.experts.intermediate = intermediate_size;
  return moe;
}

std::vector<bool> qwen_sparse_layers(const io::ConfigReader& r, int64_t num_layers, int64_t num_experts) {
  const int64_t step = std::abs(r.integer("decoder_sparse_step", 1));
  if (step == 0) fail("'decoder_sparse_step' must not be 0");
  const std::vector<int64_t> dense = r.integers("mlp_only_layers");
  std::vector<bool> sparse(static_cast<size_t>(num_layers));
  for (int64_t layer = 0; layer < num_layers; ++layer)
    sparse[size_t(layer)] = num_experts > 0 && std::find(dense.begin(), dense.end(), layer) == dense.end() &&
                            (layer + 1) % step == 0;
  return sparse;
}

bool slides_from_max_window_layers(int64_t layer, int64_t max_window_layers, bool windowed) {
  return windowed && layer >= max_window_layers;
}

std::vector<std::optional<int64_t>> qwen_sliding_windows(const io::ConfigReader& r, int64_t num_layers,
                                                         bool reads_layer_types, SlidingRule derived) {
  std::optional<int64_t> window;
  // Absent: the config classes' default 4096; an explicit null: no window.
  if (r.boolean("use_sliding_window", false) && !r.is_null("sliding_window")) window = r.integer("sliding_window", 4096);
  const int64_t max_window_layers = r.integer("max_window_layers", 28);
  std::vector<std::string> types = reads_layer_types ? r.strings("layer_types") : std::vector<std::string>{};
  if (types.empty())
    for (int64_t layer = 0; layer < num_layers; ++layer)
      types.push_back(derived(layer, max_window_layers, window.has_value()) ? "sliding_attention" : "full_attention");
  return windows_of_layer_types(
      types, window, num_layers,
      fmt::format("'use_sliding_window' {}, {}", r.boolean("use_sliding_window", false), sliding_window_key(r)));
}

std::optional<int64_t> every_layer_window(const io::ConfigReader& r, std::optional<int64_t> absent) {
  if (r.is_null("sliding_window") || (!r.has("sliding_window") && !absent)) return std::nullopt;
  const int64_t window = r.integer("sliding_window", absent.value_or(0));
  if (window <= 0)
    fail("'sliding_window' must be positive or null, got {} (transformers' mask would hide every key)", window);
  return window;
}

std::string sliding_window_key(const io::ConfigReader& r) {
  return fmt::format("'sliding_window' {}", r.has("sliding_window") ? r.find("sliding_window")->dump() : "null");
}

std::vector<std::optional<int64_t>> windows_of_layer_types(const std::vector<std::string>& types,
                                                           std::optional<int64_t> window, int64_t num_layers,
                                                           const std::string& window_keys) {
  if (int64_t(types.size()) != num_layers)
    fail("'layer_types' must list one type per layer ({}), got {}", num_layers, types.size());
  std::vector<std::optional<int64_t>> windows(static_cast<size_t>(num_layers));
  for (size_t layer = 0; layer < windows.size(); ++layer) {
    if (types[layer] == "full_attention") continue;
    if (types[layer] != "sliding_attention")
      fail("'layer_types' holds '{}', not a layer type moetune knows", types[layer].substr(0, 100));
    if (!window || *window <= 0)
      fail(
          "layer {} is a sliding_attention layer but the window is {} ({}): transformers' sliding mask fails or "
          "hides every key there",
          layer, window ? std::to_string(*window) : "none", window_keys);
    windows[layer] = window;
  }
  return windows;
}

void build_dense_layers(DecoderConfig& c, const std::vector<std::optional<int64_t>>& windows) {
  for (size_t i = 0; i < c.spec.layers.size(); ++i) {
    AttentionSpec attention = c.attention;
    attention.sliding_window = windows[i];
    c.spec.layers[i] = attention_then(attention, MlpSpec{c.intermediate_size});
  }
  finish_decoder(c);
}

void build_qwen_moe_layers(const io::ConfigReader& r, DecoderConfig& c, const MoeSpec& moe,
                           const std::vector<std::optional<int64_t>>& windows) {
  const std::vector<bool> sparse = qwen_sparse_layers(r, c.spec.num_layers(), moe.router.num_experts);
  for (size_t i = 0; i < sparse.size(); ++i) {
    AttentionSpec attention = c.attention;
    attention.sliding_window = windows[i];
    c.spec.layers[i] = sparse[i] ? attention_then(attention, moe) : attention_then(attention, MlpSpec{c.intermediate_size});
  }
  if (std::none_of(sparse.begin(), sparse.end(), [](bool s) { return s; })) {
    // No MoE layer (num_experts 0, or every layer listed dense): no router, so no aux loss (transformers fails
    // when asked for router logits then).
    if (r.boolean("output_router_logits", false))
      fail("'output_router_logits' is true but no layer is sparse ('num_experts' {}): transformers fails there too",
           moe.router.num_experts);
    finish_decoder(c);
    return;
  }
  read_load_balancing_loss(r, c.spec);
  finish_decoder(c);
}

void read_load_balancing_loss(const io::ConfigReader& r, ModelSpec& spec, double default_coef) {
  spec.aux_loss = AuxLoss::LoadBalancing;
  spec.aux_loss_coef = r.number("router_aux_loss_coef", default_coef);
  spec.aux_loss_by_default = r.boolean("output_router_logits", false);
}

void finish_decoder(DecoderConfig& c) {
  const auto gated = [&](MlpSpec& mlp) {
    if (mlp.activation == Activation::SwiGLU) mlp.gate = c.gate;
  };
  for (LayerSpec& layer : c.spec.layers)
    for (SublayerSpec& sublayer : layer.sublayers) {
      if (auto* mlp = std::get_if<MlpSpec>(&sublayer.mixer)) gated(*mlp);
      if (auto* moe = std::get_if<MoeSpec>(&sublayer.mixer)) {
        gated(moe->experts);
        if (moe->shared_expert) gated(moe->shared_expert->mlp);
      }
    }
  validate_decoder(c.spec);
}

void validate_decoder(const ModelSpec& spec) {
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers) {
      // The blocks that read SublayerSpec::out_norm and an empty norm: q/k/v attention, the dense MLP and the MoE
      // block.
      const bool norms_placed =
          (sublayer.attention() && !sublayer.attention()->mla) || sublayer.mlp() || sublayer.moe();
      MOETUNE_CHECK(norms_placed || (!sublayer.norm.empty() && sublayer.out_norm.empty()),
                    "{}: a sublayer without its input norm or with an output norm is implemented for q/k/v attention, "
                    "dense MLPs and MoE layers only",
                    spec.architecture);
      // The same blocks read SublayerSpec::residual_scale (their output norm's step, model/sublayer_norm.h), and
      // the Mamba2 block.
      MOETUNE_CHECK(norms_placed || sublayer.mamba2() || sublayer.residual_scale == 1.0,
                    "{}: a residual multiplier other than 1 is implemented for q/k/v attention, dense MLPs, MoE and "
                    "Mamba2 layers only",
                    spec.architecture);
      // The blocks that read SublayerSpec::norm_weight_offset (Gemma's and Qwen3-Next's 1 + weight norms).
      MOETUNE_CHECK(sublayer.norm_weight_offset == 0.0f || (sublayer.attention() && !sublayer.attention()->mla) ||
                        sublayer.mlp() || sublayer.moe() || sublayer.gated_delta(),
                    "{}: norms scaling by an offset weight are implemented for q/k/v attention, dense MLPs, MoE and "
                    "Gated DeltaNet layers only",
                    spec.architecture);
      if (const AttentionSpec* a = sublayer.attention(); a && a->output_gate)
        MOETUNE_CHECK(!a->mla, "{}: a gated latent attention is not implemented", spec.architecture);
      if (const GatedDeltaSpec* g = sublayer.gated_delta()) {
        require_in_range(g->num_k_heads, "linear_num_key_heads", kMaxWidth);
        require_in_range(g->num_v_heads, "linear_num_value_heads", kMaxWidth);
        require_in_range(g->k_head_dim, "linear_key_head_dim", kMaxWidth);
        require_in_range(g->v_head_dim, "linear_value_head_dim", kMaxWidth);
        require_in_range(g->conv_kernel, "linear_conv_kernel_dim", 1024);
        if (g->num_v_heads % g->num_k_heads != 0)
          fail("'linear_num_value_heads' ({}) is not a multiple of 'linear_num_key_heads' ({})", g->num_v_heads,
               g->num_k_heads);
      }
      if (const MlpSpec* mlp = sublayer.mlp()) require_in_range(mlp->intermediate, "intermediate_size", kMaxWidth);
      if (const MoeSpec* moe = sublayer.moe()) {
        require_in_range(moe->router.num_experts, "num_experts", kMaxExperts);
        require_in_range(moe->router.top_k, "num_experts_per_tok", kMaxExperts);
        require_in_range(moe->experts.intermediate, "moe_intermediate_size", kMaxWidth);
        if (moe->router.top_k > moe->router.num_experts)
          fail("'num_experts_per_tok' ({}) exceeds the number of experts ({})", moe->router.top_k, moe->router.num_experts);
        if (moe->shared_expert) require_in_range(moe->shared_expert->mlp.intermediate, "shared_expert_intermediate_size", kMaxWidth);
      }
    }
}

}  // namespace moetune::model
