#include "moetune/data/text_codec.h"

#include "moetune/core/error.h"
#include "moetune/data/chat_template_setting.h"
#include "moetune/io/json_file.h"
#include "moetune/model/model_description.h"
#include "moetune/text/chat_template.h"
#include "moetune/text/jinja_template.h"

namespace moetune::data {

namespace fs = std::filesystem;

namespace {

// tokenizer_config.json, or null when the folder has none.
nlohmann::json tokenizer_config(const fs::path& folder) {
  const fs::path path = folder / "tokenizer_config.json";
  return fs::exists(path) ? io::read_json_file(path) : nlohmann::json();
}

// tokenizer_config.json writes special tokens as strings or as {"content": ...} objects.
std::optional<std::string> special_token(const fs::path& folder, const char* key) {
  const nlohmann::json config = tokenizer_config(folder);
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const nlohmann::json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) return value["content"].get<std::string>();
  return std::nullopt;
}

bool has_chat_template(const fs::path& folder) {
  if (fs::exists(folder / "chat_template.jinja")) return true;
  const nlohmann::json config = tokenizer_config(folder);
  return config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null();
}

std::shared_ptr<text::ChatTemplate> template_override(const fs::path& folder, const std::string& setting) {
  const std::string name = fs::is_regular_file(setting) ? setting : "data.chat_template";
  return std::make_shared<text::ChatTemplate>(
      text::ChatTemplate::from_string(chat_template_source(setting), name, text::ChatTemplate::special_tokens_of(folder)));
}

}  // namespace

ModelText load_model_text(const fs::path& folder, const ChatSettings& settings) {
  ModelText text;
  const model::ModelSpec config = model::load_model_spec(folder / "config.json");
  text.codec.vocab_size = config.vocab_size;
  for (int64_t id : config.eos_token_ids) text.stop_ids.push_back(id);
  if (!fs::exists(folder / "tokenizer.json")) {
    const std::string name = folder.string();
    // Kimi-K2 and Moonlight ship a tiktoken BPE file (tiktoken.model) and Python code instead of tokenizer.json.
    const std::string tiktoken = fs::exists(folder / "tiktoken.model")
                                     ? " (its tiktoken.model, a tiktoken tokenizer, is not read by moetune)"
                                     : "";
    text.codec.encode = [name, tiktoken](std::string_view) -> std::vector<int64_t> {
      fail("{} has no tokenizer.json{}: only {{\"input_ids\": [...]}} data can be used with it", name, tiktoken);
    };
    return text;
  }
  text.tokenizer = std::make_shared<text::Tokenizer>(text::Tokenizer::from_folder(folder));
  if (text.stop_ids.empty())
    if (auto eos = special_token(folder, "eos_token"))
      if (auto id = text.tokenizer->token_to_id(*eos)) text.stop_ids.push_back(*id);
  if (!text.stop_ids.empty()) text.codec.eos_id = text.stop_ids.front();
  text.codec.prefix_ids.assign(text.tokenizer->prefix_ids().begin(), text.tokenizer->prefix_ids().end());
  text.codec.suffix_ids.assign(text.tokenizer->suffix_ids().begin(), text.tokenizer->suffix_ids().end());
  std::shared_ptr<text::ChatTemplate> chat;
  if (!settings.chat_template.empty()) chat = template_override(folder, settings.chat_template);
  else if (has_chat_template(folder)) chat = std::make_shared<text::ChatTemplate>(text::ChatTemplate::from_folder(folder));
  if (chat) {
    const Json kwargs = settings.template_kwargs;
    text.codec.render_chat = [chat, kwargs](const Json& messages, bool add_generation_prompt, const Json& tools) {
      Json extra = kwargs;
      if (!tools.is_null()) extra["tools"] = tools;
      return chat->apply(messages, add_generation_prompt, extra);
    };
    text.codec.render_chat_generation = [chat, kwargs](const Json& messages, const Json& tools,
                                                       std::vector<std::pair<size_t, size_t>>& spans) -> std::optional<std::string> {
      if (!chat->has_generation_blocks(!tools.is_null())) return std::nullopt;
      Json extra = kwargs;
      if (!tools.is_null()) extra["tools"] = tools;
      std::vector<text::jinja::GenerationSpan> blocks;
      std::string whole = chat->apply_marking_generation(messages, extra, blocks);
      spans.clear();
      for (const auto& block : blocks) spans.emplace_back(block.begin, block.end);
      return whole;
    };
  }
  std::shared_ptr<text::Tokenizer> tokenizer = text.tokenizer;
  text.codec.encode = [tokenizer](std::string_view s) {
    const std::vector<int32_t> ids = tokenizer->encode(s);
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  text.codec.encode_continuation = [tokenizer](std::string_view s) {
    const std::vector<int32_t> ids = tokenizer->encode(s, /*starts_text=*/false);
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  return text;
}

}  // namespace moetune::data
