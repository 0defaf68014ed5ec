// `moetune generate MODEL_DIR --prompt ...`: what the model says, greedy or sampled, optionally in chat form.
#pragma once

#include <filesystem>
#include <string>

#include "moetune/model/generate.h"

namespace moetune::cli {

struct GenerateArgs {
  std::filesystem::path model;
  std::string prompt;
  bool chat = false;  // wrap the prompt as a user message with the model's chat template
  model::GenerateOptions options;
};

std::string run_generate(const GenerateArgs& args);  // the generated text

}  // namespace moetune::cli
