// A LoRA adapter's settings, as the recipe's `lora:` section and PEFT's adapter_config.json hold them, and which
// of the model's weights it targets by PEFT's rules: `target_modules` names HF modules (a list: a module whose
// name is the entry or ends with "." + entry; a single entry holding regex characters: a regex the whole module
// name must match; "all-linear": every attention and MLP projection, lm_head excluded), `target_parameters`
// names fused expert parameters the same way ("mlp.experts.gate_up_proj", as PEFT 0.18+ does).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moetune::model {

struct LoraConfig {
  int64_t rank = 0;  // 0: no LoRA
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> target_modules, target_parameters;
  // Modules trained in full beside the adapters and saved with them (PEFT's modules_to_save): e.g. "gate" (an MoE
  // router), "post_attention_layernorm".
  std::vector<std::string> modules_to_save;
  bool use_rslora = false;
  uint64_t seed = 0;  // A's initialisation and the dropout masks
  std::string base_model;  // adapter_config.json's base_model_name_or_path: the folder the adapter was made on

  bool enabled() const { return rank > 0; }
  double scale() const;  // alpha / r, or alpha / sqrt(r) with rslora
  bool targets_module(const std::string& module) const;     // "model.layers.0.self_attn.q_proj"
  bool targets_parameter(const std::string& name) const;    // "model.layers.0.mlp.experts.gate_up_proj"
  // target_modules is a list of names (not one regex, not all-linear): each must then name something.
  bool lists_module_names() const;
  // Fails naming the key at fault; `source` names where the settings came from.
  void validate(const std::string& source) const;
};

// PEFT's rule for a listed target: the whole name, or its last dotted parts ("q_proj" names "model.layers.0.self_attn.q_proj").
bool peft_names(const std::string& target, const std::string& name);

// adapter_config.json as PEFT 0.21 writes it for these settings, with target_modules written as the list of the
// modules adapted (`modules`, full names, as PEFT writes "all-linear"): PEFT then targets exactly those; and the
// settings read back from one (the keys moetune does not run, such as DoRA or rank patterns, must be at their
// defaults).
nlohmann::json peft_adapter_config(const LoraConfig& config, const std::vector<std::string>& modules);
LoraConfig read_adapter_config(const std::filesystem::path& adapter_folder);

}  // namespace moetune::model
