#define PCRE2_CODE_UNIT_WIDTH 8
#include "moetune/text/known_patterns.h"

#include <pcre2.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "moetune/text/pre_tokenizer.h"
#include "moetune/text/utf8.h"

namespace moetune::text {
namespace {

constexpr const char* kQwen2Pattern = R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})re"
                                      R"re(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* kLlama3Pattern = R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})re"
                                       R"re(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// What the patterns tell characters apart by: \p{L}, \p{N}, \s, or none of those.
enum CharClass : uint8_t { kUnknown = 0, kLetter, kNumber, kSpace, kOther };

constexpr char32_t kCodePoints = 0x110000;

// Classes as PCRE2 gives them (its Unicode tables, not utf8proc's newer ones, so that both paths agree), looked up
// once per code point on first sight and kept; relaxed atomics, as racing threads compute the same value.
class UnicodeClasses {
 public:
  UnicodeClasses() : classes_(new std::atomic<uint8_t>[kCodePoints]) {
    for (char32_t c = 0; c < kCodePoints; ++c) classes_[c].store(kUnknown, std::memory_order_relaxed);
    letter_ = compile(R"(\p{L})");
    number_ = compile(R"(\p{N})");
    space_ = compile(R"(\s)");
  }
  ~UnicodeClasses() {
    for (pcre2_code* code : {letter_, number_, space_}) pcre2_code_free(code);
  }
  UnicodeClasses(const UnicodeClasses&) = delete;
  UnicodeClasses& operator=(const UnicodeClasses&) = delete;

  CharClass of(char32_t c) {
    auto known = CharClass(classes_[c].load(std::memory_order_relaxed));
    if (known != kUnknown) return known;
    std::string character;
    utf8::append(character, c);
    known = matches(letter_, character) ? kLetter : matches(number_, character) ? kNumber
            : matches(space_, character) ? kSpace : kOther;
    classes_[c].store(known, std::memory_order_relaxed);
    return known;
  }

 private:
  static pcre2_code* compile(const char* pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &error, &offset, nullptr);
  }
  static bool matches(pcre2_code* code, const std::string& character) {
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(pcre2_match_data_create(1, nullptr),
                                                                        pcre2_match_data_free);
    return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(character.data()), character.size(), 0, 0, data.get(),
                       nullptr) >= 0;
  }

  std::unique_ptr<std::atomic<uint8_t>[]> classes_;
  pcre2_code *letter_ = nullptr, *number_ = nullptr, *space_ = nullptr;
};

constexpr std::array<CharClass, 128> ascii_classes() {
  std::array<CharClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    const bool space = (c >= 0x09 && c <= 0x0D) || c == ' ';
    classes[size_t(c)] = letter ? kLetter : (c >= '0' && c <= '9') ? kNumber : space ? kSpace : kOther;
  }
  return classes;
}
constexpr std::array<CharClass, 128> kAsciiClasses = ascii_classes();

struct Character {
  CharClass kind;
  size_t end;  // where the character ends
};

// Out of line, so that the ASCII path of character_at stays small enough to inline into every loop.
[[gnu::noinline]] Character non_ascii_character_at(std::string_view text, size_t pos) {
  static UnicodeClasses unicode;
  const char32_t c = utf8::next(text, pos);
  return {unicode.of(c), pos};
}

inline Character character_at(std::string_view text, size_t pos) {
  const auto byte = uint8_t(text[pos]);
  if (byte < 0x80) return {kAsciiClasses[byte], pos + 1};
  return non_ascii_character_at(text, pos);
}

CharClass class_at(std::string_view text, size_t pos) {
  return pos < text.size() ? character_at(text, pos).kind : kUnknown;
}

// The end of the run of characters of `kind` that starts at `pos`.
size_t run_end(std::string_view text, size_t pos, CharClass kind) {
  while (pos < text.size()) {
    const Character next = character_at(text, pos);
    if (next.kind != kind) break;
    pos = next.end;
  }
  return pos;
}

bool is_newline(std::string_view text, size_t pos) {
  return pos < text.size() && (text[pos] == '\r' || text[pos] == '\n');
}

// The length of the contraction ('s 't 're 've 'm 'll 'd) at `pos`, 0 when there is none. Case-insensitive, PCRE2
// (as Oniguruma) folds case by Unicode, so ſ (U+017F, long s) counts as an s.
size_t contraction_length(std::string_view text, size_t pos, bool ignore_case) {
  if (text[pos] != '\'') return 0;
  const auto at = [&](size_t i) -> char {
    if (pos + i >= text.size()) return 0;
    const char c = text[pos + i];
    return ignore_case && c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
  };
  const char first = at(1);
  if (first == 's' || first == 't' || first == 'm' || first == 'd') return 2;
  if (ignore_case && text.substr(pos + 1).starts_with("\xC5\xBF")) return 3;  // 'ſ
  if ((first == 'r' || first == 'v') && at(2) == 'e') return 3;
  if (first == 'l' && at(2) == 'l') return 3;
  return 0;
}

// The whitespace alternatives the three patterns end with, for the run of whitespace at `pos`:
// \s+(?!\S) takes the run but its last character when something other than whitespace follows; \s+ the rest.
size_t whitespace_end(std::string_view text, size_t pos, size_t run_end_at) {
  if (run_end_at == text.size()) return run_end_at;
  size_t last = run_end_at;
  utf8::previous(text, last);
  return last > pos ? last : run_end_at;
}

// Qwen2 (max_digits 1) and Llama-3 (max_digits 3): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
// \p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <int max_digits>
size_t match_qwen_like(std::string_view text, size_t pos) {
  if (const size_t length = contraction_length(text, pos, true)) return pos + length;
  const Character first = character_at(text, pos);
  if (first.kind == kLetter) return run_end(text, first.end, kLetter);
  if (first.kind != kNumber && !is_newline(text, pos) && class_at(text, first.end) == kLetter)
    return run_end(text, first.end, kLetter);  // one leading non-letter (a space, a quote) and letters
  if (first.kind == kNumber) {
    size_t end = first.end;
    for (int digits = 1; digits < max_digits && end < text.size(); ++digits) {
      const Character next = character_at(text, end);
      if (next.kind != kNumber) break;
      end = next.end;
    }
    return end;
  }
  size_t start = pos;
  if (text[pos] == ' ' && class_at(text, pos + 1) == kOther) start = pos + 1;
  if (class_at(text, start) == kOther) {
    size_t end = run_end(text, start, kOther);
    while (is_newline(text, end)) ++end;
    return end;
  }
  // Whitespace. \s*[\r\n]+ reaches up to the last newline of the run when there is one.
  const size_t spaces_end = run_end(text, pos, kSpace);
  for (size_t end = spaces_end; end > pos; --end)
    if (text[end - 1] == '\r' || text[end - 1] == '\n') return end;
  return whitespace_end(text, pos, spaces_end);
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(std::string_view text, size_t pos) {
  if (const size_t length = contraction_length(text, pos, false)) return pos + length;
  size_t start = pos;
  if (text[pos] == ' ' && pos + 1 < text.size() && class_at(text, pos + 1) != kSpace) start = pos + 1;
  const CharClass kind = class_at(text, start);
  if (kind != kSpace) return run_end(text, start, kind);
  return whitespace_end(text, pos, run_end(text, pos, kSpace));
}

}  // namespace

KnownPatternMatcher known_pattern_matcher(std::string_view pattern) {
  if (pattern == kQwen2Pattern) return match_qwen_like<1>;
  if (pattern == kLlama3Pattern) return match_qwen_like<3>;
  if (pattern == kGpt2Pattern) return match_gpt2;
  return nullptr;
}

}  // namespace moetune::text
