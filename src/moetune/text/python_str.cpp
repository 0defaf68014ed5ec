#include "moetune/text/python_str.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "moetune/core/error.h"

namespace moetune::text::py {

namespace {

constexpr char32_t kEscapedByteBase = 0xDC00;  // surrogateescape: invalid byte b decodes to U+DC00 + b

bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

// The well-formed sequence starting at `pos`: its code point and length, or length 0 when the bytes there are not
// valid UTF-8 (overlong forms, surrogates and values past U+10FFFF included).
std::pair<char32_t, size_t> decode_one(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return uint8_t(text[pos + i]); };
  const uint8_t lead = byte(0);
  if (lead < 0x80) return {lead, 1};
  size_t length = 0;
  char32_t code_point = 0;
  char32_t minimum = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, code_point = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code_point = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code_point = lead & 0x07, minimum = 0x10000;
  } else {
    return {0, 0};
  }
  if (pos + length > text.size()) return {0, 0};
  for (size_t i = 1; i < length; ++i) {
    if (!is_continuation(byte(i))) return {0, 0};
    code_point = (code_point << 6) | (byte(i) & 0x3F);
  }
  if (code_point < minimum || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) return {0, 0};
  return {code_point, length};
}

std::u32string decode_chars(const std::optional<std::string>& chars) {
  return chars ? decode(*chars) : std::u32string();
}

bool in_set(char32_t c, const std::u32string& set) { return set.find(c) != std::u32string::npos; }

// A full case mapping would turn "ß" into "SS"; utf8proc gives the simple one-to-one mappings, which agree with
// Python for everything but a handful of such characters.
char32_t map_case(char32_t c, utf8proc_int32_t (*mapping)(utf8proc_int32_t)) {
  if (c >= 0xD800 && c <= 0xDFFF) return c;
  return char32_t(mapping(utf8proc_int32_t(c)));
}

// The unconditional one-to-many mappings of Unicode's SpecialCasing.txt that Python applies and utf8proc's simple
// mappings lack, for the Latin characters likely in chat text ("ß".upper() is "SS"); the Greek and Armenian ones
// keep their simple mapping.
struct SpecialCase {
  char32_t c;
  const char32_t* upper;
  const char32_t* title;
};
constexpr SpecialCase kSpecialCases[] = {
    {0x00DF, U"SS", U"Ss"},   {0x0149, U"\u02BCN", U"\u02BCN"}, {0x01F0, U"J\u030C", U"J\u030C"},
    {0xFB00, U"FF", U"Ff"},   {0xFB01, U"FI", U"Fi"},           {0xFB02, U"FL", U"Fl"},
    {0xFB03, U"FFI", U"Ffi"}, {0xFB04, U"FFL", U"Ffl"},         {0xFB05, U"ST", U"St"},
    {0xFB06, U"ST", U"St"},
};

void append_mapped(std::string& out, char32_t c, bool to_title) {
  for (const SpecialCase& special : kSpecialCases) {
    if (special.c != c) continue;
    for (const char32_t* p = to_title ? special.title : special.upper; *p; ++p) append_code_point(out, *p);
    return;
  }
  append_code_point(out, map_case(c, to_title ? utf8proc_totitle : utf8proc_toupper));
}

void append_lowered(std::string& out, char32_t c) {
  if (c == 0x0130) {  // "İ".lower() is "i" and a combining dot above
    out += "i\u0307";
    return;
  }
  append_code_point(out, map_case(c, utf8proc_tolower));
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 || c == 0x2028 ||
         c == 0x2029;
}

std::string substring(const std::u32string& text, size_t begin, size_t end) {
  return encode(std::u32string_view(text).substr(begin, end - begin));
}

}  // namespace

std::u32string decode(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  size_t pos = 0;
  while (pos < utf8.size()) {
    const auto [code_point, length] = decode_one(utf8, pos);
    if (length == 0) {
      out.push_back(kEscapedByteBase + uint8_t(utf8[pos]));
      pos += 1;
    } else {
      out.push_back(code_point);
      pos += length;
    }
  }
  return out;
}

void append_code_point(std::string& out, char32_t c) {
  if (c >= kEscapedByteBase + 0x80 && c <= kEscapedByteBase + 0xFF) {
    out.push_back(char(c - kEscapedByteBase));
  } else if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (const char32_t c : code_points) append_code_point(out, c);
  return out;
}

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return uint8_t(c) < 0x80; });
}

size_t length(std::string_view text) { return is_ascii(text) ? text.size() : decode(text).size(); }

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string code_points = decode(text);
  const std::u32string set = decode_chars(chars);
  const auto strippable = [&](char32_t c) { return chars ? in_set(c, set) : is_space(c); };
  size_t begin = 0;
  size_t end = code_points.size();
  if (left)
    while (begin < end && strippable(code_points[begin])) ++begin;
  if (right)
    while (end > begin && strippable(code_points[end - 1])) --end;
  return substring(code_points, begin, end);
}

std::vector<std::string> split(std::string_view text, const std::optional<std::string>& separator, int64_t max_split) {
  uint64_t remaining = max_split < 0 ? UINT64_MAX : uint64_t(max_split);
  std::vector<std::string> parts;
  if (separator) {
    if (separator->empty()) fail("empty separator");
    size_t start = 0;
    for (; remaining > 0; --remaining) {
      const size_t found = text.find(*separator, start);
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(start, found - start));
      start = found + separator->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  // CPython's split_whitespace: runs of whitespace separate, and none are kept at either end.
  const std::u32string s = decode(text);
  size_t i = 0;
  for (; remaining > 0; --remaining) {
    while (i < s.size() && is_space(s[i])) ++i;
    if (i == s.size()) break;
    const size_t j = i;
    while (i < s.size() && !is_space(s[i])) ++i;
    parts.push_back(substring(s, j, i));
  }
  while (i < s.size() && is_space(s[i])) ++i;
  if (i < s.size()) parts.push_back(substring(s, i, s.size()));
  return parts;
}

std::vector<std::string> rsplit(std::string_view text, const std::optional<std::string>& separator, int64_t max_split) {
  uint64_t remaining = max_split < 0 ? UINT64_MAX : uint64_t(max_split);
  std::vector<std::string> parts;
  if (separator) {
    if (separator->empty()) fail("empty separator");
    size_t end = text.size();
    for (; remaining > 0; --remaining) {
      if (end < separator->size()) break;
      const size_t found = text.substr(0, end).rfind(*separator);
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(found + separator->size(), end - found - separator->size()));
      end = found;
    }
    parts.emplace_back(text.substr(0, end));
  } else {
    const std::u32string s = decode(text);
    size_t i = s.size();  // one past the character looked at, so that the loop never goes below zero
    for (; remaining > 0; --remaining) {
      while (i > 0 && is_space(s[i - 1])) --i;
      if (i == 0) break;
      const size_t j = i;
      while (i > 0 && !is_space(s[i - 1])) --i;
      parts.push_back(substring(s, i, j));
    }
    while (i > 0 && is_space(s[i - 1])) --i;
    if (i > 0) parts.push_back(substring(s, 0, i));
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view text, bool keep_ends) {
  const std::u32string s = decode(text);
  std::vector<std::string> lines;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    if (!is_line_break(s[i])) {
      ++i;
      continue;
    }
    const size_t line_end = i;
    i += (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
    lines.push_back(substring(s, start, keep_ends ? i : line_end));
    start = i;
  }
  if (start < s.size()) lines.push_back(substring(s, start, s.size()));
  return lines;
}

std::string replace(std::string_view text, std::string_view old_text, std::string_view new_text, int64_t count) {
  uint64_t remaining = count < 0 ? UINT64_MAX : uint64_t(count);
  std::string out;
  if (old_text.empty()) {
    // Python inserts the replacement before every character and once at the end.
    const std::u32string s = decode(text);
    for (const char32_t c : s) {
      if (remaining > 0) out += new_text, --remaining;
      append_code_point(out, c);
    }
    if (remaining > 0) out += new_text;
    return out;
  }
  size_t start = 0;
  for (; remaining > 0; --remaining) {
    const size_t found = text.find(old_text, start);
    if (found == std::string_view::npos) break;
    out += text.substr(start, found - start);
    out += new_text;
    start = found + old_text.size();
  }
  out += text.substr(start);
  return out;
}

int64_t find(std::string_view text, std::string_view sub) {
  const size_t found = text.find(sub);
  return found == std::string_view::npos ? -1 : int64_t(length(text.substr(0, found)));
}

int64_t rfind(std::string_view text, std::string_view sub) {
  const size_t found = text.rfind(sub);
  return found == std::string_view::npos ? -1 : int64_t(length(text.substr(0, found)));
}

int64_t count(std::string_view text, std::string_view sub) {
  if (sub.empty()) return int64_t(length(text)) + 1;
  int64_t n = 0;
  for (size_t found = text.find(sub); found != std::string_view::npos; found = text.find(sub, found + sub.size())) ++n;
  return n;
}

std::string upper(std::string_view text) {
  std::string out;
  for (const char32_t c : decode(text)) append_mapped(out, c, false);
  return out;
}

std::string lower(std::string_view text) {
  std::string out;
  for (const char32_t c : decode(text)) append_lowered(out, c);
  return out;
}

bool is_cased_letter(char32_t c) {
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  const utf8proc_category_t category = utf8proc_category(utf8proc_int32_t(c));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT;
}

namespace {

bool all_cased_in(std::string_view text, utf8proc_category_t wanted) {
  bool any_cased = false;
  for (const char32_t c : decode(text)) {
    if (!is_cased_letter(c)) continue;
    if (utf8proc_category(utf8proc_int32_t(c)) != wanted) return false;
    any_cased = true;
  }
  return any_cased;
}

}  // namespace

bool is_lower(std::string_view text) { return all_cased_in(text, UTF8PROC_CATEGORY_LL); }
bool is_upper(std::string_view text) { return all_cased_in(text, UTF8PROC_CATEGORY_LU); }

std::string title(std::string_view text) {
  std::string out;
  bool previous_is_cased = false;
  for (const char32_t c : decode(text)) {
    if (previous_is_cased) {
      append_lowered(out, c);
    } else {
      append_mapped(out, c, true);
    }
    previous_is_cased = is_cased_letter(c);
  }
  return out;
}

std::string capitalize(std::string_view text) {
  std::string out;
  bool first = true;
  for (const char32_t c : decode(text)) {
    if (first) {
      append_mapped(out, c, true);
    } else {
      append_lowered(out, c);
    }
    first = false;
  }
  return out;
}

std::string repr(std::string_view text) {
  const std::u32string s = decode(text);
  const bool has_single = s.find(U'\'') != std::u32string::npos;
  const bool has_double = s.find(U'"') != std::u32string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (const char32_t c : s) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      append_code_point(out, c);
    } else {
      std::array<char, 16> buffer{};
      const char* format = c <= 0xFF ? "\\x%02x" : c <= 0xFFFF ? "\\u%04x" : "\\U%08x";
      std::snprintf(buffer.data(), buffer.size(), format, unsigned(c));
      out += buffer.data();
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // The shortest round-trip digits, then laid out as Python's repr does: positional for exponents in [-4, 16),
  // scientific (with at least two exponent digits) outside.
  std::array<char, 64> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::scientific);
  const std::string_view scientific(buffer.data(), size_t(result.ptr - buffer.data()));
  const size_t e = scientific.find('e');
  std::string digits;
  bool negative = false;
  for (const char c : scientific.substr(0, e)) {
    if (c == '-') negative = true;
    if (c >= '0' && c <= '9') digits += c;
  }
  int exponent = 0;
  const std::string_view exponent_text = scientific.substr(e + 1);
  std::from_chars(exponent_text.data() + (exponent_text[0] == '+' ? 1 : 0), exponent_text.data() + exponent_text.size(),
                  exponent);
  std::string out = negative ? "-" : "";
  const int digit_count = int(digits.size());
  if (exponent >= -4 && exponent < 16) {
    const int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0." + std::string(size_t(-point), '0') + digits;
    } else if (point >= digit_count) {
      out += digits + std::string(size_t(point - digit_count), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(point)) + "." + digits.substr(size_t(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digit_count > 1) out += "." + digits.substr(1);
  std::array<char, 16> exponent_buffer{};
  std::snprintf(exponent_buffer.data(), exponent_buffer.size(), "e%c%02d", exponent < 0 ? '-' : '+',
                std::abs(exponent));
  return out + exponent_buffer.data();
}

std::vector<size_t> slice_indices(size_t size, std::optional<int64_t> start, std::optional<int64_t> stop,
                                  std::optional<int64_t> step) {
  const int64_t n = int64_t(size);
  const int64_t stride = step.value_or(1);
  if (stride == 0) fail("slice step cannot be zero");
  // PySlice_AdjustIndices: a bound below the start clamps to 0 (or to "before the first" when stepping back).
  const auto adjust = [&](int64_t index) {
    if (index < 0) {
      index += n;
      if (index < 0) index = stride < 0 ? -1 : 0;
    } else if (index >= n) {
      index = stride < 0 ? n - 1 : n;
    }
    return index;
  };
  const int64_t first = start ? adjust(*start) : (stride < 0 ? n - 1 : 0);
  const int64_t last = stop ? adjust(*stop) : (stride < 0 ? -1 : n);
  std::vector<size_t> indices;
  for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride) indices.push_back(size_t(i));
  return indices;
}

}  // namespace moetune::text::py
