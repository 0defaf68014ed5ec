// tokenizer.json's normalizers: Unicode NFC (Qwen2/Qwen3, through utf8proc), and the SentencePiece-style Prepend and
// Replace that Llama-2's legacy files use ("▁" before the text, each space as "▁").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moetune::text {

// `text` in NFC. Most text is NFC already (all of ASCII is), so only the stretches around characters that NFC could
// change go through utf8proc; the result is `text` itself when nothing changes, else it lives in `storage`.
// `text` must be valid UTF-8.
std::string_view nfc(std::string_view text, std::string& storage);

// A chain of normalizers applied in order, as tokenizers' Sequence applies them. Empty: the text as it is.
class Normalizer {
 public:
  void add_nfc() { steps_.push_back({Kind::Nfc, {}, {}}); }
  // Puts `prefix` before a text that is not empty.
  void add_prepend(std::string prefix) { steps_.push_back({Kind::Prepend, std::move(prefix), {}}); }
  // Replaces every occurrence of `pattern` (not empty) by `content`, left to right.
  void add_replace(std::string pattern, std::string content) {
    steps_.push_back({Kind::Replace, std::move(pattern), std::move(content)});
  }
  bool empty() const { return steps_.empty(); }
  // `text` normalized: `text` itself when no step changes it, else a view of `storage`. `text` must be valid UTF-8.
  std::string_view apply(std::string_view text, std::string& storage) const;

 private:
  enum class Kind { Nfc, Prepend, Replace };
  struct Step {
    Kind kind;
    std::string text, content;  // Prepend: text; Replace: pattern and content
  };
  std::vector<Step> steps_;
};

}  // namespace moetune::text
