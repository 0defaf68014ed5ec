#include "moetune/text/utf8.h"

#include <cstring>

namespace moetune::text::utf8 {
namespace {

// How many bytes of a well-formed sequence start at `pos` (1 to 4), or, for an ill-formed one, minus the length of
// its maximal subpart (the longest prefix that could still have begun a valid sequence; at least 1 byte).
int sequence_length(std::string_view bytes, size_t pos) {
  const uint8_t lead = uint8_t(bytes[pos]);
  if (lead < 0x80) return 1;
  int length = 0;
  uint8_t low = 0x80, high = 0xBF;  // the range of the second byte; Unicode narrows it after some lead bytes
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  for (int i = 1; i < length; ++i) {
    if (pos + size_t(i) >= bytes.size()) return -i;
    const uint8_t byte = uint8_t(bytes[pos + size_t(i)]);
    const uint8_t lo = i == 1 ? low : 0x80, hi = i == 1 ? high : 0xBF;
    if (byte < lo || byte > hi) return -i;
  }
  return length;
}

}  // namespace

size_t find_invalid(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    // Runs of ASCII are most text; skip them eight bytes at a time.
    while (pos + 8 <= bytes.size()) {
      uint64_t word;
      std::memcpy(&word, bytes.data() + pos, 8);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= bytes.size()) break;
    const int length = sequence_length(bytes, pos);
    if (length < 0) return pos;
    pos += size_t(length);
  }
  return kValid;
}

std::string repair(std::string_view bytes) {
  if (find_invalid(bytes) == kValid) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 16);
  size_t pos = 0;
  while (pos < bytes.size()) {
    const int length = sequence_length(bytes, pos);
    if (length > 0) {
      out.append(bytes.substr(pos, size_t(length)));
      pos += size_t(length);
    } else {
      append(out, 0xFFFD);
      pos += size_t(-length);
    }
  }
  return out;
}

void append(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out += char(code_point);
  } else if (code_point < 0x800) {
    out += char(0xC0 | (code_point >> 6));
    out += char(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += char(0xE0 | (code_point >> 12));
    out += char(0x80 | ((code_point >> 6) & 0x3F));
    out += char(0x80 | (code_point & 0x3F));
  } else {
    out += char(0xF0 | (code_point >> 18));
    out += char(0x80 | ((code_point >> 12) & 0x3F));
    out += char(0x80 | ((code_point >> 6) & 0x3F));
    out += char(0x80 | (code_point & 0x3F));
  }
}

}  // namespace moetune::text::utf8
