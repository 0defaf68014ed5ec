#include "moetune/io/hf_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "moetune/core/error.h"

namespace moetune::io {
namespace {

using nlohmann::json;

struct FamilyEntry {
  Family family;
  const char* architecture;
  const char* model_type;
};
constexpr FamilyEntry kFamilies[] = {
    {Family::Llama, "LlamaForCausalLM", "llama"},
    {Family::Qwen3, "Qwen3ForCausalLM", "qwen3"},
    {Family::Qwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe"},
};

// Typed reads of config.json keys: a missing key or null gives the default (as transformers does), a value
// of the wrong type is an error naming the key.
class Reader {
 public:
  explicit Reader(const json& object) : object_(object) {}

  const json* find(const char* key) const {
    auto found = object_.find(key);
    return found == object_.end() || found->is_null() ? nullptr : &*found;
  }
  int64_t integer(const char* key, int64_t fallback) const {
    const json* value = find(key);
    return value ? as_integer(*value, key) : fallback;
  }
  std::optional<int64_t> optional_integer(const char* key) const {
    const json* value = find(key);
    return value ? std::optional<int64_t>(as_integer(*value, key)) : std::nullopt;
  }
  double number(const char* key, double fallback) const {
    const json* value = find(key);
    if (!value) return fallback;
    if (!value->is_number()) fail("'{}' must be a number, got {}", key, value->dump());
    return value->get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    const json* value = find(key);
    if (!value) return fallback;
    if (!value->is_boolean()) fail("'{}' must be true or false, got {}", key, value->dump());
    return value->get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    const json* value = find(key);
    if (!value) return fallback;
    if (!value->is_string()) fail("'{}' must be a string, got {}", key, value->dump());
    return value->get<std::string>();
  }
  std::vector<int64_t> integers(const char* key) const {  // an integer or a list of them
    const json* value = find(key);
    std::vector<int64_t> result;
    if (!value) return result;
    if (!value->is_array()) return {as_integer(*value, key)};
    for (const json& item : *value) result.push_back(as_integer(item, key));
    return result;
  }

  static int64_t as_integer(const json& value, const char* key) {
    if (value.is_number_integer()) return value.get<int64_t>();
    // 2048.0 is written by some tools; accept a float only when it is a whole number.
    if (value.is_number_float() && std::nearbyint(value.get<double>()) == value.get<double>() &&
        std::fabs(value.get<double>()) < 9.0e15)
      return int64_t(value.get<double>());
    fail("'{}' must be an integer, got {}", key, value.dump());
  }

 private:
  const json& object_;
};

Family resolve_family(const json& config, std::string& architecture) {
  std::string names;
  for (const auto& entry : kFamilies) names += fmt::format("{}{} ({})", names.empty() ? "" : ", ", entry.architecture, entry.model_type);
  auto architectures = config.find("architectures");
  if (architectures != config.end() && !architectures->is_null()) {
    if (!architectures->is_array() || architectures->empty() || !(*architectures)[0].is_string())
      fail("'architectures' must be a list of class names, got {}", architectures->dump());
    architecture = (*architectures)[0].get<std::string>();
    for (const auto& entry : kFamilies)
      if (architecture == entry.architecture) return entry.family;
    fail("architecture '{}' is not supported; supported: {}", architecture, names);
  }
  std::string model_type = Reader(config).string("model_type", "");
  for (const auto& entry : kFamilies)
    if (model_type == entry.model_type) {
      architecture = entry.architecture;
      return entry.family;
    }
  fail("neither 'architectures' nor a supported 'model_type' (got '{}'); supported: {}", model_type, names);
}

// v5 writes rope_parameters = {rope_type, rope_theta, ...}; v4 writes rope_theta beside an optional
// rope_scaling = {type or rope_type, factor, ...}. Values inside the dict win over top-level ones.
RopeConfig parse_rope(const Reader& top, int64_t max_position_embeddings) {
  RopeConfig rope;
  const json* parameters = top.find("rope_parameters");
  if (!parameters) parameters = top.find("rope_scaling");
  json dict = parameters ? *parameters : json::object();
  if (!dict.is_object()) fail("'rope_parameters' must be an object, got {}", dict.dump());
  // Per-layer-type RoPE ({"full_attention": {...}, "sliding_attention": {...}}): one set must serve all.
  if (dict.contains("full_attention") && dict["full_attention"].is_object()) {
    json first = dict["full_attention"];
    for (auto& [layer_type, value] : dict.items())
      if (value != first) fail("'rope_parameters' differs between layer types; moetune needs one RoPE for all layers");
    dict = first;
  }
  Reader reader(dict);
  rope.type = reader.string("rope_type", reader.string("type", "default"));
  rope.theta = reader.number("rope_theta", top.number("rope_theta", 10000.0));
  rope.factor = reader.number("factor", 1.0);
  rope.low_freq_factor = reader.number("low_freq_factor", 1.0);
  rope.high_freq_factor = reader.number("high_freq_factor", 4.0);
  rope.original_max_position_embeddings = reader.integer(
      "original_max_position_embeddings", top.integer("original_max_position_embeddings", max_position_embeddings));
  rope.partial_rotary_factor = reader.number("partial_rotary_factor", top.number("partial_rotary_factor", 1.0));
  return rope;
}

void require_positive(int64_t value, const char* key) {
  if (value <= 0) fail("'{}' must be positive, got {}", key, value);
}

void validate(const ModelConfig& c) {
  require_positive(c.vocab_size, "vocab_size");
  require_positive(c.hidden_size, "hidden_size");
  require_positive(c.num_hidden_layers, "num_hidden_layers");
  require_positive(c.num_attention_heads, "num_attention_heads");
  require_positive(c.num_key_value_heads, "num_key_value_heads");
  require_positive(c.head_dim, "head_dim");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("'num_attention_heads' ({}) must be a multiple of 'num_key_value_heads' ({})", c.num_attention_heads,
         c.num_key_value_heads);
  if (c.hidden_act != "silu" && c.hidden_act != "swish")
    fail("'hidden_act' is '{}'; moetune's {} supports only 'silu'", c.hidden_act, family_name(c.family));
  if (c.rms_norm_eps <= 0) fail("'rms_norm_eps' must be positive, got {}", c.rms_norm_eps);
  if (c.rope.theta <= 0) fail("'rope_theta' must be positive, got {}", c.rope.theta);
  bool any_dense = false;
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) any_dense |= !c.is_moe_layer(layer);
  if (any_dense) require_positive(c.intermediate_size, "intermediate_size");
  if (c.is_moe()) {
    require_positive(c.num_experts_per_tok, "num_experts_per_tok");
    require_positive(c.moe_intermediate_size, "moe_intermediate_size");
    require_positive(c.decoder_sparse_step, "decoder_sparse_step");
    if (c.num_experts_per_tok > c.num_experts)
      fail("'num_experts_per_tok' ({}) exceeds the number of experts ({})", c.num_experts_per_tok, c.num_experts);
  } else if (c.num_experts < 0) {
    fail("'num_experts' must not be negative, got {}", c.num_experts);
  }
}

}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!is_moe()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

std::string family_name(Family family) {
  for (const auto& entry : kFamilies)
    if (entry.family == family) return entry.model_type;
  return "?";
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& entry : kFamilies) names.push_back(entry.architecture);
  return names;
}

ModelConfig parse_config(const json& config, const std::string& source) {
  return with_context(source, [&] {
    if (!config.is_object()) fail("not a JSON object");
    ModelConfig c;
    c.json = config;
    c.family = resolve_family(config, c.architecture);
    c.model_type = family_name(c.family);
    Reader r(config);
    const bool llama = c.family == Family::Llama, qwen3 = c.family == Family::Qwen3, moe = c.family == Family::Qwen3Moe;

    // Defaults are transformers v5's for each family's config class.
    c.vocab_size = r.integer("vocab_size", llama ? 32000 : 151936);
    c.hidden_size = r.integer("hidden_size", moe ? 2048 : 4096);
    c.intermediate_size = r.integer("intermediate_size", llama ? 11008 : qwen3 ? 22016 : 6144);
    c.num_hidden_layers = r.integer("num_hidden_layers", moe ? 24 : 32);
    c.num_attention_heads = r.integer("num_attention_heads", 32);
    c.num_key_value_heads = r.integer("num_key_value_heads", moe ? 4 : qwen3 ? 32 : c.num_attention_heads);
    require_positive(c.num_attention_heads, "num_attention_heads");
    c.head_dim = r.integer("head_dim", qwen3 ? 128 : c.hidden_size / c.num_attention_heads);
    c.max_position_embeddings = r.integer("max_position_embeddings", llama ? 2048 : 32768);
    c.hidden_act = r.string("hidden_act", "silu");
    c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
    c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
    c.attention_bias = r.boolean("attention_bias", false);
    c.mlp_bias = llama && r.boolean("mlp_bias", false);
    c.qk_norm = !llama;
    c.rope = parse_rope(r, c.max_position_embeddings);
    if (!llama && r.boolean("use_sliding_window", false)) c.sliding_window = r.integer("sliding_window", 4096);
    if (const json* types = r.find("layer_types")) {
      if (!types->is_array() || int64_t(types->size()) != c.num_hidden_layers)
        fail("'layer_types' must list one type per layer ({}), got {}", c.num_hidden_layers, types->dump());
      for (const json& type : *types) {
        if (!type.is_string()) fail("'layer_types' entries must be strings, got {}", type.dump());
        c.layer_types.push_back(type.get<std::string>());
      }
    }
    if (moe) {
      // v5 writes num_local_experts, v4 num_experts; either may be present.
      c.num_experts = r.integer("num_local_experts", r.integer("num_experts", 128));
      c.num_experts_per_tok = r.integer("num_experts_per_tok", 8);
      c.moe_intermediate_size = r.integer("moe_intermediate_size", 768);
      c.decoder_sparse_step = r.integer("decoder_sparse_step", 1);
      c.mlp_only_layers = r.integers("mlp_only_layers");
      c.norm_topk_prob = r.boolean("norm_topk_prob", false);
      c.router_aux_loss_coef = r.number("router_aux_loss_coef", 0.001);
      c.output_router_logits = r.boolean("output_router_logits", false);
      for (int64_t layer : c.mlp_only_layers)
        if (layer < 0 || layer >= c.num_hidden_layers)
          fail("'mlp_only_layers' names layer {}, but there are {} layers", layer, c.num_hidden_layers);
    }
    std::string dtype_text = r.string("dtype", r.string("torch_dtype", ""));
    if (!dtype_text.empty()) {
      c.dtype = dtype_from_torch_name(dtype_text);
      if (!c.dtype) fail("'dtype' is '{}', not a torch dtype moetune knows", dtype_text);
    }
    c.bos_token_id = r.optional_integer("bos_token_id");
    c.pad_token_id = r.optional_integer("pad_token_id");
    c.eos_token_ids = r.integers("eos_token_id");
    validate(c);
    return c;
  });
}

ModelConfig load_config(const std::filesystem::path& config_json) {
  std::ifstream stream(config_json);
  if (!stream) fail("{}: cannot open", config_json.string());
  json config;
  try {
    config = json::parse(stream);
  } catch (const json::exception& e) {
    fail("{}: not JSON ({})", config_json.string(), e.what());
  }
  return parse_config(config, config_json.string());
}

}  // namespace moetune::io
