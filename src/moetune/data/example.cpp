#include "moetune/data/example.h"

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"

namespace moetune::data {
namespace {

using json = Json;

void append(Example& example, const std::vector<int64_t>& ids, bool scored) {
  example.ids.insert(example.ids.end(), ids.begin(), ids.end());
  example.scored.insert(example.scored.end(), ids.size(), scored ? 1 : 0);
}

const std::string& string_field(const json& line, const char* key) {
  auto found = line.find(key);
  if (found == line.end()) fail("missing \"{}\"", key);
  if (!found->is_string()) fail("\"{}\" must be a string", key);
  return found->get_ref<const std::string&>();
}

// Assistant turns are scored, the rest is context. Each assistant turn is found by rendering the conversation up
// to it twice — with the generation prompt (its context) and with the turn (its text) — so the template decides
// where every turn starts and ends; the pieces are tokenized one by one.
Example chat_example(const json& messages, const TextCodec& codec, bool loss_on_prompt) {
  if (!messages.is_array() || messages.empty()) fail("\"messages\" must be a non-empty list");
  if (!codec.render_chat) fail("\"messages\" lines need the model's chat template, and the model folder has none");
  Example example;
  std::string rendered;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& message = messages[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      fail("message {} has no \"role\"", i);
    if (message["role"] != "assistant") continue;
    const json before = json(std::vector<json>(messages.begin(), messages.begin() + long(i)));
    const json through = json(std::vector<json>(messages.begin(), messages.begin() + long(i) + 1));
    const std::string context = codec.render_chat(before, true), with_turn = codec.render_chat(through, false);
    if (!context.starts_with(rendered) || !with_turn.starts_with(context))
      fail("the chat template does not render message {} as an extension of the messages before it", i);
    append(example, codec.encode(std::string_view(context).substr(rendered.size())), loss_on_prompt);
    append(example, codec.encode(std::string_view(with_turn).substr(context.size())), true);
    rendered = with_turn;
  }
  const std::string whole = codec.render_chat(messages, false);
  if (!whole.starts_with(rendered)) fail("the chat template renders the conversation inconsistently");
  append(example, codec.encode(std::string_view(whole).substr(rendered.size())), loss_on_prompt);
  return example;
}

}  // namespace

Format format_from_name(const std::string& name) {
  if (name == "auto") return Format::Auto;
  if (name == "text") return Format::Text;
  if (name == "prompt_completion") return Format::PromptCompletion;
  if (name == "messages") return Format::Messages;
  if (name == "input_ids") return Format::InputIds;
  fail("data format '{}' is not one of: auto, text, prompt_completion, messages, input_ids", name);
}

Format detect_format(const json& line) {
  if (!line.is_object()) fail("not a JSON object");
  if (line.contains("input_ids")) return Format::InputIds;
  if (line.contains("messages")) return Format::Messages;
  if (line.contains("prompt") || line.contains("completion")) return Format::PromptCompletion;
  if (line.contains("text")) return Format::Text;
  fail("none of the keys \"text\", \"prompt\"/\"completion\", \"messages\", \"input_ids\"");
}

Example make_example(const json& line, Format format, const TextCodec& codec, bool loss_on_prompt) {
  if (!line.is_object()) fail("not a JSON object");
  if (format == Format::Auto) format = detect_format(line);
  Example example;
  switch (format) {
    case Format::Auto: break;
    case Format::Text:
      append(example, codec.encode(string_field(line, "text")), true);
      if (codec.eos_id) append(example, {*codec.eos_id}, true);
      break;
    case Format::PromptCompletion:
      append(example, codec.encode(string_field(line, "prompt")), loss_on_prompt);
      append(example, codec.encode(string_field(line, "completion")), true);
      if (codec.eos_id) append(example, {*codec.eos_id}, true);
      break;
    case Format::Messages: example = chat_example(line.contains("messages") ? line["messages"] : json(), codec, loss_on_prompt); break;
    case Format::InputIds: {
      auto ids = line.find("input_ids");
      if (ids == line.end() || !ids->is_array()) fail("\"input_ids\" must be a list of token ids");
      for (const json& id : *ids) {
        if (!id.is_number_integer()) fail("\"input_ids\" must hold integers, got {}", io::abbreviated_dump(id));
        example.ids.push_back(id.get<int64_t>());
      }
      example.scored.assign(example.ids.size(), 1);
      break;
    }
  }
  for (size_t i = 0; i < example.ids.size(); ++i)
    if (example.ids[i] < 0 || (codec.vocab_size > 0 && example.ids[i] >= codec.vocab_size))
      fail("token id {} at index {} is outside the vocabulary [0, {})", example.ids[i], i, codec.vocab_size);
  if (example.ids.size() < 2) fail("fewer than two tokens: nothing to learn from");
  return example;
}

}  // namespace moetune::data
