// The Metaspace pre-tokenizer of SentencePiece-style tokenizer.json files (Llama-2, Mistral, Mixtral): spaces
// become "▁", a "▁" goes before the text, and (with split) the text is cut before each "▁".
#pragma once

#include <string>
#include <string_view>

namespace moetune::text {

struct Metaspace {
  // When "▁" goes before a piece that does not start with it: always, only before the piece that starts the text
  // ("first": not after an added token such as <s>), or never.
  enum class Prepend { Always, First, Never };

  std::string replacement = "\xE2\x96\x81";  // U+2581 "▁"
  Prepend prepend = Prepend::Always;
  bool split = true;

  // The piece with spaces replaced and the prefix put before it, in `out`. `starts_text`: the piece begins the
  // whole text (tokenizers checks that its offset in the original text is 0).
  void transform(std::string_view piece, bool starts_text, std::string& out) const;

  // Calls emit(word) for each word of a transformed piece: the whole piece without split; with split, cut so that
  // each "▁" starts a word, except one followed by another "▁" or by the end, which stays a word alone
  // (tokenizers' MergedWithNext).
  template <typename Emit>
  void for_each_word(std::string_view transformed, Emit&& emit) const {
    if (transformed.empty()) return;
    if (!split) return emit(transformed);
    const size_t width = replacement.size();
    size_t start = 0;  // where the current word starts
    for (size_t at = transformed.find(replacement); at != std::string_view::npos;
         at = transformed.find(replacement, at + width)) {
      const bool followed = at + width < transformed.size() && transformed.compare(at + width, width, replacement) != 0;
      if (at > start) emit(transformed.substr(start, at - start));
      if (followed) {
        start = at;  // the "▁" opens the next word
      } else {
        emit(transformed.substr(at, width));
        start = at + width;
      }
    }
    if (start < transformed.size()) emit(transformed.substr(start));
  }
};

}  // namespace moetune::text
