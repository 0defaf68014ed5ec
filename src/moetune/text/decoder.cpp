#include "moetune/text/decoder.h"

#include <optional>

#include "moetune/text/byte_level.h"
#include "moetune/text/utf8.h"

namespace moetune::text {
namespace {

using Tokens = std::vector<std::string>;

std::string replace_all(const std::string& text, const std::string& pattern, const std::string& content) {
  if (pattern.empty()) return text;
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(pattern); at != std::string::npos; at = text.find(pattern, from)) {
    out.append(text, from, at - from);
    out += content;
    from = at + pattern.size();
  }
  out.append(text, from);
  return out;
}

Tokens fuse(const Tokens& tokens) {
  std::string all;
  for (const std::string& token : tokens) all += token;
  return {all};
}

Tokens byte_level(const Tokens& tokens) {
  std::string bytes;
  for (const std::string& token : tokens) append_byte_level_decoded(token, bytes);
  return {utf8::repair(bytes)};
}

// The byte a "<0xAB>" token stands for (exactly six characters, two hex digits).
std::optional<unsigned char> fallback_byte(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
  unsigned value = 0;
  for (char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + unsigned(digit);
  }
  return static_cast<unsigned char>(value);
}

Tokens byte_fallback(const Tokens& tokens) {
  Tokens out;
  std::string run;  // the bytes of the current run of byte tokens
  size_t run_tokens = 0;
  const auto flush = [&] {
    if (run_tokens == 0) return;
    if (utf8::find_invalid(run) == utf8::kValid)
      out.push_back(run);
    else
      out.insert(out.end(), run_tokens, "\xEF\xBF\xBD");  // U+FFFD per byte token
    run.clear();
    run_tokens = 0;
  };
  for (const std::string& token : tokens) {
    if (auto byte = fallback_byte(token)) {
      run += char(*byte);
      ++run_tokens;
      continue;
    }
    flush();
    out.push_back(token);
  }
  flush();
  return out;
}

// Up to `start` leading and `stop` trailing copies of `content` (one character) off `token`.
std::string strip(const std::string& token, const std::string& content, size_t start, size_t stop) {
  size_t begin = 0, end = token.size();
  for (size_t i = 0; i < start && end - begin >= content.size() && token.compare(begin, content.size(), content) == 0; ++i)
    begin += content.size();
  for (size_t i = 0; i < stop && end - begin >= content.size() && token.compare(end - content.size(), content.size(), content) == 0; ++i)
    end -= content.size();
  return token.substr(begin, end - begin);
}

}  // namespace

std::string Decoder::decode(Tokens tokens) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::ByteLevel: tokens = byte_level(tokens); break;
      case Kind::Fuse: tokens = fuse(tokens); break;
      case Kind::ByteFallback: tokens = byte_fallback(tokens); break;
      case Kind::Replace:
        for (std::string& token : tokens) token = replace_all(token, step.text, step.content);
        break;
      case Kind::Metaspace:
        // HF drops every replacement character of the first token (not only a leading one) when it prepends.
        for (size_t i = 0; i < tokens.size(); ++i)
          tokens[i] = replace_all(tokens[i], step.text, i == 0 && step.start ? "" : " ");
        break;
      case Kind::Strip:
        for (std::string& token : tokens) token = strip(token, step.text, step.start, step.stop);
        break;
    }
  }
  return utf8::repair(fuse(tokens).front());
}

}  // namespace moetune::text
