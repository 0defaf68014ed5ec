// What the decoder families share in config.json: sizes, norms, RoPE, token ids, the attention spec, and the
// checks that refuse what the engine does not run. Each family passes its own defaults (transformers' config
// class defaults differ per family) and builds its layer pattern from the result.
#pragma once

#include <optional>
#include <vector>

#include "moetune/io/config_reader.h"
#include "moetune/model/model_spec.h"

namespace moetune::model {

struct DecoderDefaults {
  int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008, num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  std::optional<int64_t> num_key_value_heads;  // nullopt: num_attention_heads
  std::optional<int64_t> head_dim;             // nullopt: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // The RoPE dict the family's config class fills in when config.json has neither rope_parameters nor
  // rope_scaling (GPT-OSS: its yarn settings); nullopt: default RoPE.
  std::optional<nlohmann::json> rope_parameters;
  // The family's config class has layer_types (so a RoPE dict per layer type means something to it).
  bool has_layer_types = false;
  // Every query head has its own key and value (MLA): num_key_value_heads need not divide the heads; the family
  // decides what it means.
  bool per_head_kv = false;
  // The family's modeling code reads hidden_act (GPT-OSS's hard-codes its activation and never reads it), under
  // this key (Gemma 3's: hidden_activation) with this default.
  bool reads_hidden_act = true;
  const char* hidden_act_key = "hidden_act";
  const char* hidden_act_default = "silu";
  // Set where the family's default RoPE reads partial_rotary_factor, to the value it takes when the config has
  // none (GLM-4-MoE: 0.5); nullopt: the default RoPE rotates the whole head whatever the key says.
  std::optional<double> partial_rotary_factor;
};

struct DecoderConfig {
  ModelSpec spec;            // everything but the layers
  AttentionSpec attention;   // every layer's attention (without biases or q/k norm: the family sets those)
  int64_t intermediate_size = 0;
  ops::GateFunction gate = ops::GateFunction::Silu;  // hidden_act: every gated MLP's and expert's gate
};

DecoderConfig read_decoder_config(const io::ConfigReader& config, const DecoderDefaults& defaults);
// The part of it every family shares, whatever its layers: dtype, bos / pad / eos token ids.
void read_dtype_and_token_ids(const io::ConfigReader& config, ModelSpec& spec);

// One RoPE dict (transformers' rope_parameters for one layer type) read and checked as read_decoder_config reads
// the config's; `key` names it in messages, `config` gives the top-level keys transformers reads beside it.
ops::RopeSpec read_rope_dict(const nlohmann::json& dict, const char* key, const io::ConfigReader& config,
                             int64_t max_position_embeddings, const DecoderDefaults& defaults);

// RoPE per layer type, as Olmo3Config's and Gemma3TextConfig's convert_rope_params_to_dict resolve it: one dict
// per layer type in rope_parameters ({"full_attention": ..., "sliding_attention": ...}; a missing one is default
// RoPE); the older rope_scaling spelling is the full-attention layers' schedule, the sliding ones keeping theirs. A
// full dict without rope_theta takes the top-level rope_theta, else `full_theta`; a sliding one the top-level
// `sliding_theta_key` (Gemma 3's rope_local_base_freq; null: none), else `sliding_theta`. A flat dict is refused,
// naming `family` (the config classes would ignore it and run default RoPE).
struct LayerTypeRopes {
  nlohmann::json full, sliding;
};
struct LayerTypeRopeDefaults {
  double full_theta;
  const char* sliding_theta_key;
  double sliding_theta;
};
LayerTypeRopes read_layer_type_ropes(const io::ConfigReader& config, const LayerTypeRopeDefaults& defaults,
                                     const char* family);

// Where the RoPE settings are: "rope_scaling" unless it is absent or falsy (null, {}, false: transformers reads
// `rope_scaling or rope_parameters`), else "rope_parameters" (which may be absent).
const char* rope_dict_key(const io::ConfigReader& config);

// The token ids a family's config class fills in when config.json leaves their keys out (Phi3Config's,
// SmolLM3Config's; an explicit null stays none), and the embedding's padding row from the pad id.
struct TokenIdDefaults {
  std::optional<int64_t> pad, bos, eos;  // nullopt: the config class's default is None too
};
void apply_token_id_defaults(const io::ConfigReader& config, const TokenIdDefaults& ids, ModelSpec& spec);

// nn.Embedding(vocab, hidden, padding_idx=pad_token_id)'s row: nullopt without a pad id; a negative id counts from
// the end; one outside the table is an error naming pad_token_id.
std::optional<int64_t> embedding_padding_row(std::optional<int64_t> pad_token_id, int64_t vocab_size);

// An ungated MLP, down(relu(up x)²) (Nemotron-H's MLPs and experts, Arcee's MLP).
MlpSpec relu2_mlp(int64_t intermediate, bool bias);

// One layer of the usual shape: h + attention(input_norm(h)), then h + ffn(post_attn_norm(h)).
LayerSpec attention_then(const AttentionSpec& attention, decltype(SublayerSpec::mixer) ffn);
// One layer whose sublayers norm their outputs instead of their inputs (OLMo-2, OLMo-3, EXAONE 4.0, FlexOlmo):
// h + attn_out_norm(attention(h)), then h + mlp_out_norm(ffn(h)).
LayerSpec attention_then_output_normed(const AttentionSpec& attention, decltype(SublayerSpec::mixer) ffn);

// The Qwen MoE rule (Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer): a layer is sparse when num_experts > 0, it is
// not listed in mlp_only_layers (entries naming no layer match nothing) and (layer + 1) % decoder_sparse_step is 0
// (Python's %, so a negative step acts as its magnitude; 0 is refused: transformers divides by it).
std::vector<bool> qwen_sparse_layers(const io::ConfigReader& config, int64_t num_layers, int64_t num_experts);

// Each layer's sliding window (nullopt: full attention), as the Qwen families' config classes and modeling decide:
// the window is sliding_window when use_sliding_window (else none); which layers slide comes from layer_types when
// the family reads them and config.json lists them, else from `derived` (given whether there is a window). A layer
// that slides without a positive window (null, or Qwen2-MoE's 0 when use_sliding_window is off) is refused:
// transformers' mask then fails or hides every key.
using SlidingRule = bool (*)(int64_t layer, int64_t max_window_layers, bool windowed);
// Qwen2Config's and Qwen3Config's rule without layer_types: with a window, the layers from max_window_layers on.
bool slides_from_max_window_layers(int64_t layer, int64_t max_window_layers, bool windowed);
std::vector<std::optional<int64_t>> qwen_sliding_windows(const io::ConfigReader& config, int64_t num_layers,
                                                         bool reads_layer_types, SlidingRule derived);

// sliding_window as MixtralModel and MistralModel read it, one window for every layer: an explicit null is full
// attention, an absent key `absent` (the config class's default: none for Mixtral, 4096 for Mistral); a value must
// be positive (transformers' mask would hide every key otherwise).
std::optional<int64_t> every_layer_window(const io::ConfigReader& config, std::optional<int64_t> absent);

// Each layer's window: `window` where `types` (layer_types as written, or as the config class derives them: one a
// layer) says sliding_attention, none where full_attention. A sliding layer without a positive window is refused
// (transformers' sliding mask fails or hides every key), the message naming `window_keys`, the keys it came from.
std::vector<std::optional<int64_t>> windows_of_layer_types(const std::vector<std::string>& types,
                                                           std::optional<int64_t> window, int64_t num_layers,
                                                           const std::string& window_keys);
// "'sliding_window' <its value or null>", for window_keys.
std::string sliding_window_key(const io::ConfigReader& config);

// Dense decoder layers (attention then a SwiGLU MLP of intermediate_size), each attention with its window; then
// the shared checks.
void build_dense_layers(DecoderConfig& decoder, const std::vector<std::optional<int64_t>>& windows);

// The Qwen MoE families' layers: `moe` where qwen_sparse_layers says, a dense MLP of intermediate_size
// elsewhere, each layer's attention with its window; then their load-balancing loss and the shared checks.
void build_qwen_moe_layers(const io::ConfigReader& config, DecoderConfig& decoder, const MoeSpec& moe,
                           const std::vector<std::optional<int64_t>>& windows);

// OLMoE's MoE layer as OlmoeConfig and FlexOlmoConfig spell it: num_experts (or num_local_experts, their
// attribute_map's name), num_experts_per_tok, norm_topk_prob (absent: false), SwiGLU experts of intermediate_size.
MoeSpec read_olmoe_moe(const io::ConfigReader& config, int64_t intermediate_size, int64_t default_experts,
                       int64_t default_top_k);

// The MoE load-balancing loss as the Qwen/Mixtral/GPT-OSS/OLMoE families configure it; default_coef is the config
// class's router_aux_loss_coef (0.001, OLMoE's 0.01).
void read_load_balancing_loss(const io::ConfigReader& config, ModelSpec& spec, double default_coef = 0.001);

// Checks what every family shares once the layers exist: sizes positive and sane, k ≤ experts.
void validate_decoder(const ModelSpec& spec);
// A family's last step once its layers exist: every gated MLP (dense, routed experts, shared expert) takes the
// config's gate function (hidden_act, as transformers' ACT2FN applies it to each), then validate_decoder.
void finish_decoder(DecoderConfig& decoder);

// A config value the engine does not implement: an error naming the key and the value.
[[noreturn]] void refuse(const char* key, const std::string& value, const std::string& feature);

}  // namespace moetune::model
