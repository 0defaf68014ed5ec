// The pre-tokenizer: cuts text into the words BPE works on. Supported: `Split` stages (a regex or a literal string,
// behavior Isolated: each match and each stretch between matches is a piece) followed by one `ByteLevel` stage
// (an optional prefix space, and optionally GPT-2's regex); or `Metaspace` alone (SentencePiece style); or none (the
// text is one word). The byte-level mapping itself happens in the BPE model, so ByteLevel's words are raw text bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moetune/text/known_patterns.h"
#include "moetune/text/metaspace.h"

struct pcre2_real_code_8;

namespace moetune::text {

// The pattern GPT-2's ByteLevel pre-tokenizer splits with (use_regex = true).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A compiled PCRE2 pattern (UTF, Unicode classes, JIT where available). HF compiles these patterns with Oniguruma;
// the constructs tokenizer files use (\p{..}, (?i:..), look-ahead) mean the same in both. The patterns of GPT-2,
// Llama-3 and Qwen2 run on hand-written matchers (known_patterns.h) unless `engine` asks for PCRE2.
class Regex {
 public:
  enum class Engine { Fastest, Pcre2 };
  // `literal`: match `pattern` as plain text (Split's {"String": ...}). A bad pattern is an Error with PCRE2's
  // message and the offset.
  Regex(std::string_view pattern, bool literal, Engine engine = Engine::Fastest);
  // The first match in `text` starting at or after `from`: its start, with its end in `end`; npos when none.
  // `text` must be valid UTF-8 (it is not checked again here).
  size_t find(std::string_view text, size_t from, size_t& end) const;

 private:
  std::shared_ptr<pcre2_real_code_8> code_;
  bool jit_ = false;
  KnownPatternMatcher known_ = nullptr;
};

class PreTokenizer {
 public:
  void add_split(std::string_view pattern, bool literal);
  void add_byte_level(bool add_prefix_space, bool use_regex);
  void set_metaspace(Metaspace metaspace) { metaspace_ = std::move(metaspace); }

  // Calls emit(word) for each word of `text` (valid UTF-8), in order; words are never empty. `starts_text`: `text`
  // begins the whole text that is encoded (Metaspace's "first" prefix goes there only).
  template <typename Emit>
  void for_each_word(std::string_view text, bool starts_text, Emit&& emit) const {
    if (!metaspace_) return run(0, text, emit);
    thread_local std::string transformed;
    metaspace_->transform(text, starts_text, transformed);
    metaspace_->for_each_word(std::string_view(transformed), emit);
  }

 private:
  struct Stage {
    std::shared_ptr<const Regex> regex;  // null: the piece goes on whole
    bool add_prefix_space = false;       // ByteLevel: " " before a piece that does not start with one
  };

  template <typename Emit>
  void run(size_t stage, std::string_view piece, Emit& emit) const {
    if (stage == stages_.size()) return emit(piece);
    if (stages_[stage].add_prefix_space && piece[0] != ' ') {
      const std::string spaced = " " + std::string(piece);
      return split(stage, spaced, emit);
    }
    split(stage, piece, emit);
  }

  // The pieces of one stage, as HF's Split with behavior Isolated cuts them: matches and the text between them,
  // leaving out empty ones. An empty match right after the previous match is skipped, as Oniguruma's iterator does.
  template <typename Emit>
  void split(size_t stage, std::string_view piece, Emit& emit) const {
    const Regex* regex = stages_[stage].regex.get();
    if (!regex) return run(stage + 1, piece, emit);
    size_t search_from = 0, previous_end = 0;
    bool after_match = false;
    while (search_from <= piece.size()) {
      size_t end = 0;
      const size_t start = regex->find(piece, search_from, end);
      if (start == std::string_view::npos) break;
      if (start == end && after_match && search_from == previous_end) {
        search_from += search_from < piece.size() ? utf8_length(piece[search_from]) : 1;
        continue;
      }
      if (start > previous_end) run(stage + 1, piece.substr(previous_end, start - previous_end), emit);
      if (end > start) run(stage + 1, piece.substr(start, end - start), emit);
      search_from = previous_end = end;
      after_match = true;
    }
    if (previous_end < piece.size()) run(stage + 1, piece.substr(previous_end), emit);
  }

  static size_t utf8_length(char lead) {
    const auto byte = uint8_t(lead);
    return byte < 0xC0 ? 1 : byte < 0xE0 ? 2 : byte < 0xF0 ? 3 : 4;
  }

  std::vector<Stage> stages_;
  std::optional<Metaspace> metaspace_;  // set: the only stage
};

}  // namespace moetune::text
