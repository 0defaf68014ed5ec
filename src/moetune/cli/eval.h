// `moetune eval MODEL_DIR --data DATA... [-c RECIPE] [--set data.key=value]`: how well a model predicts data of any
// shape training reads, as the mean cross-entropy over the tokens training would score (the loss fine-tuning
// minimises) and its perplexity. With a recipe, its data section decides how lines are read exactly as in
// training (data.format, data.columns / data.roles, data.chat_template and its kwargs, data.loss_on_prompt,
// data.max_length, data.bad_lines), and --data defaults to its data.validation.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace moetune::cli {

struct EvalArgs {
  std::filesystem::path model;
  std::vector<std::string> data;  // files, folders or glob patterns, as data.train takes them
  std::string format = "auto";    // as data.format (overrides the recipe's unless auto)
  int64_t max_length = 0;         // tokens kept of each line (as data.max_length); 0: all of them, or the recipe's
  std::filesystem::path recipe;   // a training recipe whose data section applies; empty: the defaults
  std::vector<std::string> overrides;  // --set key=value, as finetune takes them
  std::string device = "auto";    // cpu (the fp32 engine), cuda (the bf16 GPU engine), or cuda when a GPU is visible
};

// Scores each line alone (a batch of one, positions from 0), through the training loader: the same line shapes,
// chat template and loss masks (a chat line scores its assistant turns, a token-id line every token after the
// first). The loss is the mean over all scored tokens, so a long line weighs more than a short one, as in training.
nlohmann::json evaluate_model(const EvalArgs& args);
std::string format_evaluation(const nlohmann::json& report);

}  // namespace moetune::cli
