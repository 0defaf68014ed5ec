// config.json -> ModelSpec through the model's family, and the parameter layout that goes with it.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_layout.h"

namespace moetune::model {

// `source` names the file in error messages.
ModelSpec describe_model(const nlohmann::json& config, const std::string& source);
ModelSpec load_model_spec(const std::filesystem::path& config_json);
ParameterLayout parameter_layout(const ModelSpec& spec);
std::vector<std::string> supported_architectures();

}  // namespace moetune::model
