#include "moetune/model/lora_config.h"

#include <cmath>
#include <regex>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"

namespace moetune::model {
namespace {

bool is_pattern(const std::string& target) { return target.find_first_of("*()[]|\\^$+?{}") != std::string::npos; }

bool matches_any(const std::vector<std::string>& targets, const std::string& name) {
  if (targets.size() == 1 && targets[0] == "all-linear") return true;  // the caller offers only linear modules
  if (targets.size() == 1 && is_pattern(targets[0])) return std::regex_match(name, std::regex(targets[0]));
  for (const std::string& target : targets)
    if (peft_names(target, name)) return true;
  return false;
}

}  // namespace

bool peft_names(const std::string& target, const std::string& name) {
  return name == target || (name.size() > target.size() && name.ends_with("." + target));
}

bool LoraConfig::lists_module_names() const {
  return !target_modules.empty() && !(target_modules.size() == 1 && (target_modules[0] == "all-linear" || is_pattern(target_modules[0])));
}

double LoraConfig::scale() const { return use_rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank); }

bool LoraConfig::targets_module(const std::string& module) const { return matches_any(target_modules, module); }

bool LoraConfig::targets_parameter(const std::string& name) const {
  for (const std::string& target : target_parameters)
    if (peft_names(target, name)) return true;
  return false;
}

void LoraConfig::validate(const std::string& source) const {
  if (rank < 0) fail("{}: 'lora.rank' must not be negative (0: no LoRA), got {}", source, rank);
  if (!enabled()) return;
  if (!(alpha > 0) || !std::isfinite(alpha)) fail("{}: 'lora.alpha' must be positive, got {}", source, alpha);
  if (!(dropout >= 0 && dropout < 1)) fail("{}: 'lora.dropout' must be in [0, 1), got {}", source, dropout);
  if (target_modules.empty() && target_parameters.empty())
    fail("{}: 'lora.target_modules' and 'lora.target_parameters' are both empty: LoRA would train nothing", source);
  if (dropout > 0 && !target_parameters.empty())
    fail("{}: 'lora.dropout' must be 0 with 'lora.target_parameters' (PEFT refuses it too: dropout on the input "
         "cannot be factored out of a merged expert weight)", source);
  if (target_modules.size() == 1 && is_pattern(target_modules[0])) try {
      std::regex check(target_modules[0]);
    } catch (const std::regex_error& e) {
      fail("{}: 'lora.target_modules' '{}' is not a valid regex: {}", source, target_modules[0], e.what());
    }
}

nlohmann::json peft_adapter_config(const LoraConfig& config, const std::vector<std::string>& modules) {
  return {{"peft_type", "LORA"},
          {"base_model_name_or_path", config.base_model},
          {"r", config.rank},
          {"lora_alpha", config.alpha},
          {"lora_dropout", config.dropout},
          {"use_rslora", config.use_rslora},
          {"target_modules", modules.empty() ? nlohmann::json(nullptr) : nlohmann::json(modules)},
          {"target_parameters", config.target_parameters.empty() ? nlohmann::json(nullptr) : nlohmann::json(config.target_parameters)},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          {"init_lora_weights", true},
          {"inference_mode", true},
          {"modules_to_save", config.modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(config.modules_to_save)},
          {"rank_pattern", nlohmann::json::object()},
          {"alpha_pattern", nlohmann::json::object()},
          {"use_dora", false},
          {"lora_bias", false},
          {"task_type", "CAUSAL_LM"},
          {"peft_version", "0.21.2"}};
}

LoraConfig read_adapter_config(const std::filesystem::path& adapter_folder) {
  const std::filesystem::path path = adapter_folder / "adapter_config.json";
  const nlohmann::json j = io::read_json_file(path);
  const auto require_default = [&](const char* key, const nlohmann::json& expected) {
    if (j.contains(key) && !j[key].is_null() && j[key] != expected)
      fail("{}: '{}' is {}; moetune runs only {}", path.string(), key, j[key].dump(), expected.dump());
  };
  if (j.value("peft_type", "") != "LORA") fail("{}: 'peft_type' must be \"LORA\"", path.string());
  require_default("use_dora", false);
  require_default("bias", "none");
  require_default("lora_bias", false);
  require_default("fan_in_fan_out", false);
  require_default("rank_pattern", nlohmann::json::object());
  require_default("alpha_pattern", nlohmann::json::object());
  require_default("layers_to_transform", nullptr);
  require_default("exclude_modules", nullptr);
  LoraConfig config;
  try {
    config.rank = j.at("r").get<int64_t>();
    config.alpha = j.at("lora_alpha").get<double>();
    config.dropout = j.value("lora_dropout", 0.0);
    config.use_rslora = j.value("use_rslora", false);
    if (j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
      config.base_model = j["base_model_name_or_path"].get<std::string>();
    const nlohmann::json& modules = j.contains("target_modules") ? j["target_modules"] : nlohmann::json(nullptr);
    if (modules.is_string()) config.target_modules = {modules.get<std::string>()};
    else if (modules.is_array()) config.target_modules = modules.get<std::vector<std::string>>();
    if (j.contains("modules_to_save") && j["modules_to_save"].is_array())
      config.modules_to_save = j["modules_to_save"].get<std::vector<std::string>>();
    if (j.contains("target_parameters") && j["target_parameters"].is_array())
      config.target_parameters = j["target_parameters"].get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", path.string(), e.what());
  }
  config.validate(path.string());
  return config;
}

}  // namespace moetune::model
