// tokenizer.json's decoder: turns the tokens of some ids back into text, as HF tokenizers' decoders do it. Each step
// maps the list of token strings to a new list, and the result is their concatenation. Steps:
//   ByteLevel     every token's byte-level characters back to bytes, all tokens fused into one (invalid UTF-8
//                 becomes U+FFFD; a token with characters outside the alphabet is taken as it is)
//   Metaspace     "▁" to " ", except in the first token when a prefix was prepended, where each "▁" goes
//   Replace       every occurrence of a string in each token by another
//   ByteFallback  runs of "<0xAB>" tokens to the text their bytes spell; when that is not valid UTF-8, one U+FFFD
//                 per byte token
//   Fuse          all tokens into one
//   Strip         up to `start` leading and `stop` trailing copies of a character off each token
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace moetune::text {

class Decoder {
 public:
  void add_byte_level() { steps_.push_back({Kind::ByteLevel}); }
  void add_metaspace(std::string replacement, bool prepends) {
    steps_.push_back({Kind::Metaspace, std::move(replacement), {}, prepends ? size_t(1) : 0});
  }
  void add_replace(std::string pattern, std::string content) {
    steps_.push_back({Kind::Replace, std::move(pattern), std::move(content)});
  }
  void add_byte_fallback() { steps_.push_back({Kind::ByteFallback}); }
  void add_fuse() { steps_.push_back({Kind::Fuse}); }
  void add_strip(std::string content, size_t start, size_t stop) {
    steps_.push_back({Kind::Strip, std::move(content), {}, start, stop});
  }

  // The text of `tokens` (the vocabulary's strings of the ids), valid UTF-8.
  std::string decode(std::vector<std::string> tokens) const;

 private:
  enum class Kind { ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip };
  struct Step {
    Kind kind;
    std::string text, content;  // Metaspace: replacement; Replace: pattern, content; Strip: content
    size_t start = 0, stop = 0;  // Strip's counts; Metaspace: 1 when it prepends
  };
  std::vector<Step> steps_;
};

}  // namespace moetune::text
