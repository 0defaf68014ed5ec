#include "moetune/text/byte_level.h"

#include "moetune/text/utf8.h"

namespace moetune::text {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other
// 68 bytes, in increasing order, take U+0100, U+0101, ...
std::array<char32_t, 256> byte_to_code_point() {
  std::array<char32_t, 256> table{};
  char32_t next_free = 0x100;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
    table[size_t(byte)] = printable ? char32_t(byte) : next_free++;
  }
  return table;
}

// The inverse, over U+0000..U+0143 (the highest character used); -1 for characters outside the alphabet.
struct CodePointToByte {
  std::array<int, 0x144> byte;
  CodePointToByte() {
    byte.fill(-1);
    const auto table = byte_to_code_point();
    for (size_t b = 0; b < 256; ++b) byte[table[b]] = int(b);
  }
  int operator()(char32_t code_point) const { return code_point < byte.size() ? byte[code_point] : -1; }
};

}  // namespace

const std::array<std::string, 256>& byte_level_alphabet() {
  static const std::array<std::string, 256> alphabet = [] {
    std::array<std::string, 256> result;
    const auto table = byte_to_code_point();
    for (size_t b = 0; b < 256; ++b) utf8::append(result[b], table[b]);
    return result;
  }();
  return alphabet;
}

std::string to_byte_level(std::string_view bytes) {
  const auto& alphabet = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char byte : bytes) out += alphabet[uint8_t(byte)];
  return out;
}

void append_byte_level_decoded(std::string_view token, std::string& out) {
  static const CodePointToByte to_byte;
  const size_t start = out.size();
  for (size_t pos = 0; pos < token.size();) {
    const int byte = to_byte(utf8::next(token, pos));
    if (byte < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out += char(byte);
  }
}

}  // namespace moetune::text
