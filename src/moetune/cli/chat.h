// `moetune chat MODEL_DIR`: a conversation with a model on the terminal. Each line read is a user turn; the whole
// conversation so far goes through the model's chat template each turn (so templates that render earlier turns
// differently, as Qwen3 drops earlier answers' thinking, see it as they expect), and the reply joins it.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>

#include "moetune/model/generate.h"

namespace moetune::cli {

struct ChatArgs {
  std::filesystem::path model;
  std::string system;  // a system message that opens the conversation; empty: none
  model::GenerateOptions options;
  std::string device = "auto";  // as generate's
  bool speed = false;           // after each reply, its prefill time and decode speed on stderr
};

// Reads user turns from `in` (one a line; blank lines are skipped; "/reset" starts the conversation afresh) until
// its end, writing each reply to `out` on its own line. `prompt_to`, when given, gets a "> " before each turn.
void run_chat(const ChatArgs& args, std::istream& in, std::ostream& out, std::ostream* prompt_to);

}  // namespace moetune::cli
