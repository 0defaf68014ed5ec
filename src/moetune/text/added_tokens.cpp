#include "moetune/text/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "moetune/text/utf8.h"

namespace moetune::text {
namespace {

// Unicode White_Space, which HF tests with Rust's regex \s.
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Rust's regex \w: Alphabetic, marks, decimal digits, connector punctuation, and the joiners. Alphabetic is the
// letters, letter numbers and Other_Alphabetic; of the latter only the circled and squared Latin letters are not marks.
bool is_word_character(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
      (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool word_before(std::string_view text, size_t pos) {
  return pos > 0 && is_word_character(utf8::previous(text, pos));
}

bool word_after(std::string_view text, size_t pos) {
  return pos < text.size() && is_word_character(utf8::next(text, pos));
}

// Where the run of whitespace that ends at `pos` starts.
size_t whitespace_start(std::string_view text, size_t pos) {
  while (pos > 0) {
    size_t before = pos;
    if (!is_whitespace(utf8::previous(text, before))) break;
    pos = before;
  }
  return pos;
}

// Where the run of whitespace that starts at `pos` ends.
size_t whitespace_end(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t after = pos;
    if (!is_whitespace(utf8::next(text, after))) break;
    pos = after;
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<std::pair<std::string, AddedToken>> patterns) {
  std::unordered_set<std::string_view> seen;
  entries_.reserve(patterns.size());
  for (auto& [pattern, token] : patterns) {
    if (pattern.empty() || seen.count(pattern)) continue;
    const auto first = uint8_t(pattern[0]);
    if (!is_first_byte_[first]) first_bytes_ += pattern[0];
    is_first_byte_[first] = true;
    entries_.push_back({std::move(pattern), token.id, token.single_word, token.lstrip, token.rstrip});
    seen.insert(entries_.back().pattern);  // entries_ was reserved: the view stays valid
    by_first_byte_[first].push_back(uint32_t(entries_.size() - 1));
  }
  for (auto& list : by_first_byte_)
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return entries_[a].pattern.size() > entries_[b].pattern.size();
    });
}

// The next position at or after `from` whose byte may start a match.
size_t AddedTokenMatcher::next_candidate(std::string_view text, size_t from, NextOccurrence& next) const {
  const char* data = text.data();
  if (first_bytes_.size() > kMemchrBytes) {
    while (from < text.size() && !is_first_byte_[uint8_t(data[from])]) ++from;
    return from < text.size() ? from : std::string_view::npos;
  }
  size_t nearest = std::string_view::npos;
  for (size_t k = 0; k < first_bytes_.size(); ++k) {
    if (next[k] != std::string_view::npos && next[k] < from) {
      const void* found = std::memchr(data + from, first_bytes_[k], text.size() - from);
      next[k] = found ? size_t(static_cast<const char*>(found) - data) : std::string_view::npos;
    }
    nearest = std::min(nearest, next[k]);
  }
  return nearest < text.size() ? nearest : std::string_view::npos;
}

size_t AddedTokenMatcher::find(std::string_view text, size_t from, size_t& entry, NextOccurrence& next) const {
  for (size_t pos; (pos = next_candidate(text, from, next)) != std::string_view::npos; from = pos + 1) {
    // Patterns are valid UTF-8 and start with a lead byte, so they can only match at character starts.
    for (uint32_t index : by_first_byte_[uint8_t(text[pos])]) {
      const std::string& pattern = entries_[index].pattern;
      if (pattern.size() <= text.size() - pos && std::memcmp(text.data() + pos, pattern.data(), pattern.size()) == 0) {
        entry = index;
        return pos;
      }
    }
  }
  return std::string_view::npos;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextPiece>& pieces) const {
  size_t piece_start = 0;  // where the text not yet given out starts
  size_t from = 0, index = 0;
  NextOccurrence next;
  next.fill(0);  // position 0 is tried once as a candidate; past it each byte's real next place is looked up
  for (size_t start; (start = find(text, from, index, next)) != std::string_view::npos;) {
    const Entry& entry = entries_[index];
    size_t stop = start + entry.pattern.size();
    from = stop;  // the search goes on from the match's end, whatever rstrip takes (as HF's does)
    if (entry.single_word && (word_before(text, start) || word_after(text, stop))) continue;
    if (entry.lstrip) start = std::max(whitespace_start(text, start), piece_start);
    if (entry.rstrip) stop = whitespace_end(text, stop);
    if (piece_start < start) pieces.push_back({text.substr(piece_start, start - piece_start), -1});
    pieces.push_back({text.substr(start, stop - start), entry.id});
    piece_start = stop;
  }
  if (piece_start < text.size()) pieces.push_back({text.substr(piece_start), -1});
}

}  // namespace moetune::text
