// UTF-8 helpers for the tokenizer: validation, code point stepping, and the lossy repair that decoding needs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moetune::text::utf8 {

inline constexpr size_t kValid = std::string_view::npos;

// The byte offset where the first invalid sequence starts, or kValid when all of `bytes` is well-formed UTF-8
// (no overlong forms, no surrogates, nothing above U+10FFFF).
size_t find_invalid(std::string_view bytes);

// Valid UTF-8 from any bytes: each maximal invalid subpart becomes one U+FFFD, as Rust's String::from_utf8_lossy
// (and so HF tokenizers' decode) does it.
std::string repair(std::string_view bytes);

void append(std::string& out, char32_t code_point);

// The code point that starts at `pos` in valid UTF-8; `pos` moves past it.
inline char32_t next(std::string_view text, size_t& pos) {
  const auto byte = [&](size_t i) { return char32_t(uint8_t(text[i])); };
  const char32_t lead = byte(pos);
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    pos += 2;
    return (lead & 0x1F) << 6 | (byte(pos - 1) & 0x3F);
  }
  if (lead < 0xF0) {
    pos += 3;
    return (lead & 0x0F) << 12 | (byte(pos - 2) & 0x3F) << 6 | (byte(pos - 1) & 0x3F);
  }
  pos += 4;
  return (lead & 0x07) << 18 | (byte(pos - 3) & 0x3F) << 12 | (byte(pos - 2) & 0x3F) << 6 | (byte(pos - 1) & 0x3F);
}

// The code point that ends just before `pos` in valid UTF-8; `pos` moves to its first byte.
inline char32_t previous(std::string_view text, size_t& pos) {
  do --pos;
  while ((uint8_t(text[pos]) & 0xC0) == 0x80);
  size_t at = pos;
  return next(text, at);
}

}  // namespace moetune::text::utf8
