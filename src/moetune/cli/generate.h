// `moetune generate MODEL_DIR --prompt ...`: what the model says, greedy or sampled, optionally in chat form.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "moetune/data/text_codec.h"
#include "moetune/model/generate.h"

namespace moetune::cli {

struct GenerateArgs {
  std::filesystem::path model;
  std::string prompt;
  bool chat = false;  // wrap the prompt as a user message with the model's chat template
  model::GenerateOptions options;
  std::string device = "auto";  // as eval's --device
  bool speed = false;           // print the prefill time and the decode speed to stderr
};

std::string run_generate(const GenerateArgs& args);  // the generated text

// The model for generate and chat on `device` (auto, cpu or cuda). With auto and a GPU visible, a family the GPU
// engine does not run yet is loaded on the CPU, with a message on stderr saying why.
std::unique_ptr<model::LanguageModel> load_generation_model(const std::filesystem::path& folder,
                                                            const std::string& device);
// "prefill: 6 tokens in 12.3 ms; decode: 19 tokens in 45.6 ms, 416.7 tokens/s (cuda)"
std::string format_timing(const model::GenerateTiming& timing, const model::LanguageModel& model);

// The options as a user gave them: an Error naming the flag at fault (--temperature, --top-p, --max-new-tokens).
void check_generate_options(const model::GenerateOptions& options);
// The model's continuation of `prompt` (text, already through the chat template where wanted), generated until one
// of the model's stop tokens, decoded without special tokens.
std::string reply_text(model::LanguageModel& model, const data::ModelText& text, const std::string& prompt,
                       model::GenerateOptions options, model::GenerateTiming* timing = nullptr);

}  // namespace moetune::cli
