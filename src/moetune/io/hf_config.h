// config.json -> a typed model configuration, for the families moetune runs (Llama, Qwen3, Qwen3-MoE).
// Accepts the spellings that transformers v4 and v5 both write (rope_theta / rope_scaling or
// rope_parameters, num_experts or num_local_experts, torch_dtype or dtype), fills defaults as transformers
// does for each family, and keeps the file's JSON so that a saved folder carries it back unchanged.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "moetune/core/dtype.h"

namespace moetune::io {

enum class Family { Llama, Qwen3, Qwen3Moe };

struct RopeConfig {
  std::string type = "default";  // default, linear, dynamic, yarn, llama3, longrope
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;
  double partial_rotary_factor = 1.0;
};

struct ModelConfig {
  Family family = Family::Llama;
  std::string architecture;  // "Qwen3MoeForCausalLM", ...
  std::string model_type;    // "qwen3_moe", ...

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP width (Qwen3-MoE: its mlp_only_layers)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v/o biases
  bool mlp_bias = false;        // Llama's gate/up/down biases
  bool qk_norm = false;         // Qwen3: RMSNorm over head_dim on q and k before RoPE
  RopeConfig rope;
  std::optional<int64_t> sliding_window;  // only when use_sliding_window
  std::vector<std::string> layer_types;   // "full_attention" / "sliding_attention" per layer

  // Mixture of experts (Qwen3-MoE); num_experts == 0 for dense models.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool norm_topk_prob = false;
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;

  std::optional<DType> dtype;  // the checkpoint's dtype as config.json states it
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;

  nlohmann::json json;  // config.json as read

  bool is_moe() const { return num_experts > 0; }
  // Qwen3-MoE's rule: sparse unless listed in mlp_only_layers, and then every decoder_sparse_step-th layer.
  bool is_moe_layer(int64_t layer) const;
};

// `source` names the file in error messages.
ModelConfig parse_config(const nlohmann::json& json, const std::string& source);
ModelConfig load_config(const std::filesystem::path& config_json);
std::vector<std::string> supported_architectures();
std::string family_name(Family family);

}  // namespace moetune::io
