// `moetune generate MODEL_DIR --prompt ...`: what the model says, greedy or sampled, optionally in chat form.
#pragma once

#include <filesystem>
#include <string>

#include "moetune/data/text_codec.h"
#include "moetune/model/generate.h"

namespace moetune::cli {

struct GenerateArgs {
  std::filesystem::path model;
  std::string prompt;
  bool chat = false;  // wrap the prompt as a user message with the model's chat template
  model::GenerateOptions options;
};

std::string run_generate(const GenerateArgs& args);  // the generated text

// The options as a user gave them: an Error naming the flag at fault (--temperature, --top-p, --max-new-tokens).
void check_generate_options(const model::GenerateOptions& options);
// The model's continuation of `prompt` (text, already through the chat template where wanted), generated until one
// of the model's stop tokens, decoded without special tokens.
std::string reply_text(model::CausalLM& model, const data::ModelText& text, const std::string& prompt,
                       model::GenerateOptions options);

}  // namespace moetune::cli
