// `moetune eval MODEL_DIR --data FILE.jsonl`: how well a model predicts token-id JSONL, as the mean token
// cross-entropy (the loss fine-tuning minimises) and its perplexity.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace moetune::cli {

// Scores each line of `data` alone (batch of one, positions from 0): every token after the first is predicted
// from those before it. The loss is the mean over all predicted tokens of the file, so a long line weighs more
// than a short one, as it does in training.
// `device`: cpu (the fp32 engine), cuda (the bf16 GPU engine) or auto (cuda when a GPU is visible).
nlohmann::json evaluate_model(const std::filesystem::path& folder, const std::filesystem::path& data,
                              const std::string& device = "auto");
std::string format_evaluation(const nlohmann::json& report);

}  // namespace moetune::cli
