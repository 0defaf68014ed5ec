// A model's chat template (Jinja2), rendered in C++ as transformers' tokenizer.apply_chat_template(messages,
// tokenize=False, add_generation_prompt=..., **extra) renders it, byte for byte, for the Jinja that chat templates
// use (jinja_template.h lists it; anything else is an Error naming the construct and its line:column).
//
//   auto chat = moetune::text::ChatTemplate::from_folder(model_dir);
//   std::string prompt = chat.apply(messages, /*add_generation_prompt=*/true, {{"enable_thinking", false}});
//
// Pass messages and extra as nlohmann::ordered_json (e.g. parsed with ordered_json::parse) to keep each dict's key
// order as Python keeps it: `tool | tojson` prints keys in that order. A plain nlohmann::json converts, sorted.
#pragma once

#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moetune::text {

namespace jinja {
class Template;
struct GenerationSpan;
}

class ChatTemplate {
 public:
  // Loads the template as transformers does: chat_template.jinja (with additional_chat_templates/*.jinja as named
  // ones) wins over tokenizer_config.json's "chat_template", which is a string or a list of {name, template}.
  // Special tokens (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token, mask_token) come from
  // tokenizer_config.json, as strings or {"content": ...} objects; special_tokens_map.json fills in missing ones.
  // A folder without a template is an Error naming the folder.
  static ChatTemplate from_folder(const std::filesystem::path& folder);

  // The special tokens of a model folder, read as from_folder reads them (for a template given separately).
  static std::vector<std::pair<std::string, std::string>> special_tokens_of(const std::filesystem::path& folder);

  // One template from its text; `special_tokens` maps names such as "eos_token" to their text.
  static ChatTemplate from_string(const std::string& source, std::string source_name = "chat_template",
                                  std::vector<std::pair<std::string, std::string>> special_tokens = {});

  // The rendered conversation. The template sees `messages`, `add_generation_prompt`, the special tokens,
  // `tools` and `documents` (None unless `extra` gives them), every other key of `extra` (enable_thinking,
  // reasoning_effort, date_string, ...; they override special tokens of the same name), and the functions
  // raise_exception(message) (an Error carrying the message) and strftime_now(format).
  std::string apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The whole conversation rendered (no generation prompt), and in `spans` where each {% generation %} block of the
  // template rendered (transformers' return_assistant_tokens_mask marks the tokens there), in the order the blocks
  // ended.
  std::string apply_marking_generation(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& extra,
                                       std::vector<jinja::GenerationSpan>& spans) const;
  // Whether the template apply() uses (with or without tools) has {% generation %} blocks.
  bool has_generation_blocks(bool has_tools) const;

  // The text of the template apply() uses when no tools are given.
  const std::string& source() const;
  std::vector<std::string> template_names() const;  // "default", then any named ones
  const std::vector<std::pair<std::string, std::string>>& special_tokens() const { return special_tokens_; }

  // strftime_now() formats `time` instead of the current local time: for reproducible renders (tests, datasets
  // whose prompts carry a date).
  void set_fixed_time(const std::tm& time) { fixed_time_ = time; }

 private:
  struct NamedTemplate {
    std::string name;
    std::string source;
    std::shared_ptr<const jinja::Template> compiled;
    bool has_generation = false;  // it has {% generation %} blocks
  };
  static NamedTemplate compile(std::string name, std::string source, std::string source_name);
  const NamedTemplate& select(bool has_tools) const;
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra, std::vector<jinja::GenerationSpan>* spans) const;

  std::vector<NamedTemplate> templates_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;
  std::optional<std::tm> fixed_time_;
};

}  // namespace moetune::text
