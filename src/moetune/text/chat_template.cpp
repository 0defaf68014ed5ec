#include "moetune/text/chat_template.h"

#include <regex>

#include <algorithm>
#include <array>
#include <chrono>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"
#include "moetune/io/regular_file.h"
#include "moetune/text/jinja_template.h"

namespace moetune::text {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

namespace {

// The named special tokens transformers passes to every template (SPECIAL_TOKENS_ATTRIBUTES).
constexpr std::array<const char*, 7> kSpecialTokenNames = {"bos_token", "eos_token", "unk_token", "sep_token",
                                                           "pad_token", "cls_token", "mask_token"};

// A template is a few KB; this is far past any real one.
constexpr uint64_t kMaxTemplateBytes = uint64_t(16) << 20;

std::string read_text(const fs::path& path) { return io::read_regular_file(path, "the chat template", kMaxTemplateBytes); }

OrderedJson read_json(const fs::path& path) { return io::read_json_file<OrderedJson>(path); }

// A token is written as "<|im_end|>" or as an AddedToken object {"content": "<|im_end|>", ...}; null means none.
std::optional<std::string> token_text(const OrderedJson& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string())
    return value["content"].get<std::string>();
  return std::nullopt;
}

void add_special_tokens(const OrderedJson& config, std::vector<std::pair<std::string, std::string>>& tokens) {
  if (!config.is_object()) return;
  for (const char* name : kSpecialTokenNames) {
    const bool known =
        std::any_of(tokens.begin(), tokens.end(), [&](const auto& token) { return token.first == name; });
    if (known || !config.contains(name)) continue;
    if (const auto text = token_text(config[name])) tokens.emplace_back(name, *text);
  }
}

std::string strftime_text(const std::string& format, const std::tm& time) {
  if (format.empty()) return "";
  // strftime reports a full buffer and an empty result alike, so grow until the result is non-empty.
  for (size_t capacity = 64; capacity <= (size_t(1) << 20); capacity *= 4) {
    std::string buffer(capacity, '\0');
    const size_t written = std::strftime(buffer.data(), buffer.size(), format.c_str(), &time);
    if (written > 0) return buffer.substr(0, written);
  }
  return "";
}

}  // namespace

ChatTemplate::NamedTemplate ChatTemplate::compile(std::string name, std::string source, std::string source_name) {
  auto compiled = std::make_shared<const jinja::Template>(source, std::move(source_name));
  // transformers' own test for {% generation %} blocks (render_jinja_template); a hit in a comment or a string only
  // makes the masks come from the blocks, which then mark nothing.
  static const std::regex generation_tag(R"(\{%-?\s*generation\s*-?%\})");
  const bool has_generation = std::regex_search(source, generation_tag);
  return {std::move(name), std::move(source), std::move(compiled), has_generation};
}

std::vector<std::pair<std::string, std::string>> ChatTemplate::special_tokens_of(const fs::path& folder) {
  std::vector<std::pair<std::string, std::string>> tokens;
  if (const fs::path config_path = folder / "tokenizer_config.json"; fs::exists(config_path))
    add_special_tokens(read_json(config_path), tokens);
  if (const fs::path map_path = folder / "special_tokens_map.json"; fs::exists(map_path))
    add_special_tokens(read_json(map_path), tokens);
  return tokens;
}

ChatTemplate ChatTemplate::from_folder(const fs::path& folder) {
  if (!fs::is_directory(folder)) fail("{}: not a folder", folder.string());
  ChatTemplate chat;
  const fs::path config_path = folder / "tokenizer_config.json";
  const OrderedJson config = fs::exists(config_path) ? read_json(config_path) : OrderedJson::object();
  chat.special_tokens_ = special_tokens_of(folder);

  const fs::path jinja_path = folder / "chat_template.jinja";
  if (fs::exists(jinja_path)) chat.templates_.push_back(compile("default", read_text(jinja_path), jinja_path.string()));
  if (const fs::path extra_dir = folder / "additional_chat_templates"; fs::is_directory(extra_dir)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(extra_dir))
      if (entry.path().extension() == ".jinja") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files)
      chat.templates_.push_back(compile(file.stem().string(), read_text(file), file.string()));
  }
  if (!chat.templates_.empty()) return chat;

  // No template files: tokenizer_config.json's "chat_template", a string or a list of {"name", "template"}.
  const std::string config_name = config_path.string() + ":chat_template";
  const auto found = config.is_object() ? config.find("chat_template") : config.end();
  if (found != config.end() && found->is_string()) {
    chat.templates_.push_back(compile("default", found->get<std::string>(), config_name));
  } else if (found != config.end() && found->is_array()) {
    for (const OrderedJson& named : *found) {
      if (!named.is_object() || !named.contains("name") || !named.contains("template") || !named["name"].is_string() ||
          !named["template"].is_string())
        fail("{}: each entry of the \"chat_template\" list must be {{\"name\": ..., \"template\": ...}}",
             config_path.string());
      const std::string name = named["name"].get<std::string>();
      chat.templates_.push_back(compile(name, named["template"].get<std::string>(), config_name + "[" + name + "]"));
    }
  } else if (found != config.end() && !found->is_null()) {
    fail("{}: \"chat_template\" must be a string or a list of {{\"name\", \"template\"}} objects",
         config_path.string());
  }
  if (chat.templates_.empty())
    fail("{}: no chat template (neither chat_template.jinja nor a \"chat_template\" in tokenizer_config.json)",
         folder.string());
  return chat;
}

ChatTemplate ChatTemplate::from_string(const std::string& source, std::string source_name,
                                       std::vector<std::pair<std::string, std::string>> special_tokens) {
  ChatTemplate chat;
  chat.templates_.push_back(compile("default", source, std::move(source_name)));
  chat.special_tokens_ = std::move(special_tokens);
  return chat;
}

const std::string& ChatTemplate::source() const { return select(false).source; }

std::vector<std::string> ChatTemplate::template_names() const {
  std::vector<std::string> names;
  for (const NamedTemplate& named : templates_) names.push_back(named.name);
  return names;
}

// transformers' get_chat_template: one template is always used; among named ones, "tool_use" when tools are given,
// else "default".
const ChatTemplate::NamedTemplate& ChatTemplate::select(bool has_tools) const {
  if (templates_.size() == 1) return templates_[0];
  const auto named = [&](const std::string& name) {
    return std::find_if(templates_.begin(), templates_.end(), [&](const NamedTemplate& t) { return t.name == name; });
  };
  if (has_tools && named("tool_use") != templates_.end()) return *named("tool_use");
  if (named("default") != templates_.end()) return *named("default");
  std::string names;
  for (const NamedTemplate& t : templates_) names += (names.empty() ? "" : ", ") + t.name;
  fail("the model has several chat templates ({}) and none is named \"default\"", names);
}

std::string ChatTemplate::apply(const OrderedJson& messages, bool add_generation_prompt,
                                const OrderedJson& extra) const {
  return render(messages, add_generation_prompt, extra, nullptr);
}

std::string ChatTemplate::apply_marking_generation(const OrderedJson& messages, const OrderedJson& extra,
                                                   std::vector<jinja::GenerationSpan>& spans) const {
  spans.clear();
  return render(messages, /*add_generation_prompt=*/false, extra, &spans);
}

bool ChatTemplate::has_generation_blocks(bool has_tools) const { return select(has_tools).has_generation; }

std::string ChatTemplate::render(const OrderedJson& messages, bool add_generation_prompt, const OrderedJson& extra,
                                 std::vector<jinja::GenerationSpan>* spans) const {
  using jinja::Value;
  if (!messages.is_array())
    fail("chat template: messages must be a list of message objects, got {}", messages.type_name());
  if (messages.empty()) fail("chat template: cannot apply a chat template to an empty conversation");
  if (!extra.is_null() && !extra.is_object())
    fail("chat template: extra arguments must be an object, got {}", extra.type_name());
  const OrderedJson none;
  const auto extra_value = [&](const char* key) -> const OrderedJson& {
    return extra.is_object() && extra.contains(key) ? extra[key] : none;
  };

  // The order of transformers' render(messages=..., tools=..., documents=..., add_generation_prompt=...,
  // **special_tokens, **kwargs): later entries win.
  std::vector<std::pair<std::string, Value>> variables = {
      {"messages", Value::json(messages)},
      {"tools", Value::json(extra_value("tools"))},
      {"documents", Value::json(extra_value("documents"))},
      {"add_generation_prompt", Value::boolean(add_generation_prompt)},
  };
  for (const auto& [name, text] : special_tokens_) variables.emplace_back(name, Value::string(text));
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == "tools" || it.key() == "documents") continue;
      if (it.key() == "messages" || it.key() == "add_generation_prompt")
        fail("chat template: \"{}\" is an argument of apply(), not an extra variable", it.key());
      variables.emplace_back(it.key(), Value::json(it.value()));
    }
  }
  variables.emplace_back(
      "raise_exception", Value::function("raise_exception", [](const jinja::Arguments& arguments) -> Value {
        const std::string message = arguments.positional.empty() ? "" : jinja::to_str(arguments.positional[0]);
        fail("the template raised an exception: {}", message);
      }));
  const std::optional<std::tm> fixed_time = fixed_time_;
  variables.emplace_back(
      "strftime_now", Value::function("strftime_now", [fixed_time](const jinja::Arguments& arguments) {
        if (arguments.positional.size() != 1 || !arguments.positional[0].is_string())
          fail("strftime_now() takes one format string");
        std::tm time{};
        if (fixed_time) {
          time = *fixed_time;
        } else {
          const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
          localtime_r(&now, &time);  // Python's datetime.now() is local time too
        }
        return Value::string(strftime_text(arguments.positional[0].as_string(), time));
      }));
  const bool has_tools = !extra_value("tools").is_null();
  return select(has_tools).compiled->render(variables, jinja::kMaxRenderWork, spans);
}

}  // namespace moetune::text
