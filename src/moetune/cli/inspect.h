// `moetune inspect MODEL_DIR`: what a model folder holds and what fine-tuning it costs in memory.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace moetune::cli {

// Reads config.json and checks the weights against it (headers only: no tensor bytes are read).
nlohmann::json inspect_model(const std::filesystem::path& folder);
std::string format_inspection(const nlohmann::json& report);

}  // namespace moetune::cli
