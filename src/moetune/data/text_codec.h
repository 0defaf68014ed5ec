// The TextCodec of a model folder: its tokenizer (tokenizer.json), end-of-sequence token (config.json's
// eos_token_id, else tokenizer_config.json's eos_token) and chat template.
#pragma once

#include <filesystem>
#include <memory>

#include "moetune/data/example.h"
#include "moetune/text/tokenizer.h"

namespace moetune::data {

struct ModelText {
  std::shared_ptr<text::Tokenizer> tokenizer;
  TextCodec codec;
  std::vector<int64_t> stop_ids;  // generation ends at any of these
};

// What a recipe says about chat templates (data.chat_template, data.chat_template_kwargs).
struct ChatSettings {
  std::string chat_template;               // a file, or the template's text; empty: the model's own
  Json template_kwargs = Json::object();   // more template variables, e.g. {"enable_thinking": false}
};

// A folder without tokenizer.json gives a codec for token-id data only (encode fails, naming the folder).
ModelText load_model_text(const std::filesystem::path& model_folder, const ChatSettings& chat = {});

}  // namespace moetune::data
