#include "moetune/data/example.h"

#include <algorithm>

#include "moetune/core/error.h"
#include "moetune/data/chat_spans.h"
#include "moetune/data/line_shapes.h"
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

// The end of a text: the post_processor's closing tokens, then EOS unless they (or the text) end with it already,
// as TRL adds it.
void close_text(Example& example, const TextCodec& codec) {
  append(example, codec.suffix_ids, true);
  if (codec.eos_id && (example.ids.empty() || example.ids.back() != *codec.eos_id)) append(example, {*codec.eos_id}, true);
}

void require_chat_template(const TextCodec& codec, const char* key) {
  if (!codec.render_chat) fail("\"{}\" lines need the model's chat template, and the model folder has none", key);
}

// A non-empty list of messages, each an object with a string "role".
void require_messages(const json& messages, const char* key) {
  if (!messages.is_array() || messages.empty()) fail("\"{}\" must be a non-empty list", key);
  for (size_t i = 0; i < messages.size(); ++i)
    if (!messages[i].is_object() || !messages[i].contains("role") || !messages[i]["role"].is_string())
      fail("{}[{}] has no \"role\"", key, i);
}

// Encodes text after the start of a text that is encoded piece by piece.
std::vector<int64_t> encode_continuation(const TextCodec& codec, std::string_view text) {
  return codec.encode_continuation ? codec.encode_continuation(text) : codec.encode(text);
}

// `whole` tokenized piece by piece: the spans scored, the text around them context.
Example tokenize_spans(const std::string& whole, const std::vector<TextSpan>& spans, const TextCodec& codec,
                       bool loss_on_prompt) {
  Example example;
  size_t done = 0;
  const auto encode_piece = [&](size_t begin, size_t end) {
    const std::string_view piece = std::string_view(whole).substr(begin, end - begin);
    return begin == 0 ? codec.encode(piece) : encode_continuation(codec, piece);
  };
  for (const TextSpan& span : spans) {
    append(example, encode_piece(done, span.begin), loss_on_prompt);
    append(example, encode_piece(span.begin, span.end), true);
    done = span.end;
  }
  append(example, encode_piece(done, whole.size()), loss_on_prompt);
  return example;
}

// The chat template with the line's "tools" (when it has them) in every rendering.
RenderChat renderer(const json& line, const TextCodec& codec) {
  const json tools = line.contains("tools") ? line["tools"] : json();
  return [&codec, tools](const json& messages, bool add_generation_prompt) {
    return codec.render_chat(messages, add_generation_prompt, tools);
  };
}

// The text the {% generation %} blocks marked, as sorted spans that do not overlap: nested and overlapping blocks
// merge, empty ones go (transformers' mask is the union of the blocks' tokens).
std::vector<TextSpan> merged_spans(std::vector<std::pair<size_t, size_t>> blocks) {
  std::sort(blocks.begin(), blocks.end());
  std::vector<TextSpan> spans;
  for (const auto& [begin, end] : blocks) {
    if (begin >= end) continue;
    if (!spans.empty() && begin <= spans.back().end)
      spans.back().end = std::max(spans.back().end, end);
    else
      spans.push_back({begin, end});
  }
  return spans;
}

// Assistant turns are scored, the rest is context. With a template that marks them with {% generation %} blocks,
// the blocks' text is scored, as transformers' return_assistant_tokens_mask gives it; otherwise the turns are found
// in the one rendering of the whole conversation (chat_spans.h says how).
Example chat_example(const json& line, const json& messages, const TextCodec& codec, bool loss_on_prompt, const char* key) {
  require_messages(messages, key);
  require_chat_template(codec, key);
  if (codec.render_chat_generation) {
    std::vector<std::pair<size_t, size_t>> blocks;
    if (std::optional<std::string> whole = codec.render_chat_generation(messages, line.contains("tools") ? line["tools"] : json(), blocks))
      return tokenize_spans(*whole, merged_spans(std::move(blocks)), codec, loss_on_prompt);
  }
  const RenderChat render = renderer(line, codec);
  const std::string whole = render(messages, false);
  return tokenize_spans(whole, assistant_spans(messages, render, whole), codec, loss_on_prompt);
}

// TRL's conversational prompt/completion: the prompt rendered with the generation prompt is the context, the rest
// of the rendering of prompt + completion is scored, whatever roles the completion holds.
Example conversational_prompt_completion(const json& line, const TextCodec& codec, bool loss_on_prompt) {
  const json& prompt = line["prompt"];
  const json completion = line.contains("completion") ? line["completion"] : json();
  require_messages(prompt, "prompt");
  require_messages(completion, "completion");
  require_chat_template(codec, "prompt");
  json messages = prompt;
  messages.insert(messages.end(), completion.begin(), completion.end());
  const RenderChat render = renderer(line, codec);
  const std::string whole = render(messages, false);
  const size_t begin = generation_prompt_end(render(prompt, true), whole);
  return tokenize_spans(whole, {{begin, whole.size()}}, codec, loss_on_prompt);
}

std::string key_list(const json& line) {
  std::string keys;
  for (const auto& [key, unused] : line.items()) keys += (keys.empty() ? "\"" : ", \"") + key + "\"";
  return keys.empty() ? "none" : keys;
}

}  // namespace

Format format_from_name(const std::string& name) {
  if (name == "auto") return Format::Auto;
  if (name == "text") return Format::Text;
  if (name == "prompt_completion") return Format::PromptCompletion;
  if (name == "messages") return Format::Messages;
  if (name == "sharegpt") return Format::ShareGpt;
  if (name == "alpaca") return Format::Alpaca;
  if (name == "input_ids") return Format::InputIds;
  fail("data format '{}' is not one of: auto, text, prompt_completion, messages, sharegpt, alpaca, input_ids", name);
}

Format detect_format(const json& line) {
  if (!line.is_object()) fail("not a JSON object");
  if (line.contains("input_ids")) return Format::InputIds;
  if (line.contains("messages")) return Format::Messages;
  if (line.contains("conversations")) return Format::ShareGpt;
  if (line.contains("instruction") && line.contains("output")) return Format::Alpaca;
  if (line.contains("prompt") || line.contains("completion")) return Format::PromptCompletion;
  if (line.contains("text")) return Format::Text;
  fail("a line of no known shape: its keys are {}; expected \"text\", \"prompt\"/\"completion\", \"messages\", "
       "\"conversations\" (ShareGPT), \"instruction\"/\"output\" (Alpaca) or \"input_ids\"",
       key_list(line));
}

Example make_example(const json& line, Format format, const TextCodec& codec, bool loss_on_prompt) {
  if (!line.is_object()) fail("not a JSON object");
  if (format == Format::Auto) format = detect_format(line);
  Example example;
  switch (format) {
    case Format::Auto: break;
    case Format::Text:
      append(example, codec.prefix_ids, true);
      append(example, codec.encode(string_field(line, "text")), true);
      close_text(example, codec);
      break;
    case Format::PromptCompletion:
      if (line.contains("prompt") && line["prompt"].is_array()) {
        example = conversational_prompt_completion(line, codec, loss_on_prompt);
        break;
      }
      append(example, codec.prefix_ids, loss_on_prompt);
      append(example, codec.encode(string_field(line, "prompt")), loss_on_prompt);
      append(example, encode_continuation(codec, string_field(line, "completion")), true);
      close_text(example, codec);
      break;
    case Format::Messages:
      example = chat_example(line, line.contains("messages") ? line["messages"] : json(), codec, loss_on_prompt, "messages");
      break;
    case Format::ShareGpt: example = chat_example(line, sharegpt_messages(line), codec, loss_on_prompt, "conversations"); break;
    case Format::Alpaca: example = chat_example(line, alpaca_messages(line), codec, loss_on_prompt, "instruction"); break;
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
