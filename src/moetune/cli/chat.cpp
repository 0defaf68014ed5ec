#include "moetune/cli/chat.h"

#include <cstdio>
#include <istream>
#include <ostream>

#include "moetune/cli/generate.h"
#include "moetune/core/error.h"
#include "moetune/data/text_codec.h"

namespace moetune::cli {

void run_chat(const ChatArgs& args, std::istream& in, std::ostream& out, std::ostream* prompt_to) {
  check_generate_options(args.options);
  const data::ModelText text = data::load_model_text(args.model);
  if (!text.tokenizer) fail("{}: no tokenizer.json, so there is no text to chat with", args.model.string());
  if (!text.codec.render_chat) fail("{}: the model has no chat template (chat_template.jinja or tokenizer_config.json's "
                                    "chat_template); use `moetune generate --prompt` for plain text", args.model.string());
  const std::unique_ptr<model::LanguageModel> model = load_generation_model(args.model, args.device);
  const data::Json opening = args.system.empty() ? data::Json::array()
                                                 : data::Json::array({{{"role", "system"}, {"content", args.system}}});
  data::Json messages = opening;
  for (std::string line;;) {
    if (prompt_to) *prompt_to << "> " << std::flush;
    if (!std::getline(in, line)) break;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (line == "/reset") {
      messages = opening;
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", line}});
    model::GenerateTiming timing;
    const std::string reply =
        reply_text(*model, text, text.codec.render_chat(messages, true, data::Json()), args.options, &timing);
    if (args.speed) std::fprintf(stderr, "%s\n", format_timing(timing, *model).c_str());
    messages.push_back({{"role", "assistant"}, {"content", reply}});
    out << reply << "\n" << std::flush;
  }
}

}  // namespace moetune::cli
