// Training examples from JSONL lines: token ids with a mask of the tokens the loss scores. The line shapes the
// recipe's data.format names: {"text"}, {"prompt", "completion"} (strings, or TRL's conversational form: lists of
// messages), {"messages"}, ShareGPT's {"conversations"}, Alpaca's {"instruction", "input", "output"}, {"input_ids"}.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moetune::data {

// Lines keep their key order (as Python's json does): a chat template's `tojson` prints dicts in that order.
using Json = nlohmann::ordered_json;

struct Example {
  std::vector<int64_t> ids;
  std::vector<uint8_t> scored;  // per token: 1 when it is a label the loss counts
};

enum class Format { Auto, Text, PromptCompletion, Messages, ShareGpt, Alpaca, InputIds };
Format format_from_name(const std::string& name);
// The format a line's keys announce; an Error when they announce none.
Format detect_format(const Json& line);

// What turning text into examples needs from the tokenizer and the chat template.
struct TextCodec {
  std::function<std::vector<int64_t>(std::string_view)> encode;
  // Encodes text that continues a text encoded piece by piece (no "start of text" prefix, as SentencePiece-style
  // tokenizers put before a text's start only); unset: encode.
  std::function<std::vector<int64_t>(std::string_view)> encode_continuation;
  std::optional<int64_t> eos_id;  // appended to text and completions so the model learns to stop
  // The special tokens the tokenizer's post_processor puts around a text (Llama-3's BOS before it), as
  // transformers' tokenizer(text) adds them: around `text` lines and string prompt + completion. Chat templates
  // write their own.
  std::vector<int64_t> prefix_ids, suffix_ids;
  // Renders messages with the chat template: add_generation_prompt as the second argument, the line's "tools" (or
  // null) as the third.
  std::function<std::string(const Json&, bool, const Json&)> render_chat;
  // For templates with {% generation %} blocks: renders messages (with the line's "tools" or null) and gives where
  // the blocks rendered, as [begin, end) byte pairs; nullopt when the template used has no such blocks.
  std::function<std::optional<std::string>(const Json&, const Json&, std::vector<std::pair<size_t, size_t>>&)> render_chat_generation;
  int64_t vocab_size = 0;
};

// Errors say what is wrong with the line; the caller adds the file and line number.
Example make_example(const Json& line, Format format, const TextCodec& codec, bool loss_on_prompt);

}  // namespace moetune::data
