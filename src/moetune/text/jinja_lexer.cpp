#include "moetune/text/jinja_lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "moetune/text/python_str.h"

namespace moetune::text::jinja {

void fail_at(const std::string& source_name, SourceLocation location, const std::string& message) {
  throw TemplateError(fmt::format("{}:{}:{}: {}", source_name, location.line, location.column, message));
}

std::string normalize_template_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

enum class TagKind { kVariable, kBlock, kComment };

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Longest first, so that "//" is not read as two "/".
constexpr std::array<std::string_view, 26> kOperators = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                                         "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                                         ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& source_name) : source_(source), source_name_(source_name) {}

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < source_.size()) pos = lex_data_and_tag(pos);
    tokens_.push_back({TokenKind::kEnd, "", location(source_.size())});
    return std::move(tokens_);
  }

 private:
  SourceLocation location(size_t offset) const {
    if (line_starts_.empty()) {
      line_starts_.push_back(0);
      for (size_t i = 0; i < source_.size(); ++i)
        if (source_[i] == '\n') line_starts_.push_back(i + 1);
    }
    const auto line = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - 1;
    SourceLocation where{int(line - line_starts_.begin()) + 1, 1};
    size_t from = *line;
    // Tokens come in order: counting on from the last one keeps a 600 KB one-line template linear.
    if (counted_offset_ >= from && counted_offset_ <= offset && counted_.line == where.line) {
      from = counted_offset_;
      where.column = counted_.column;
    }
    for (size_t i = from; i < offset && i < source_.size(); ++i)
      if ((uint8_t(source_[i]) & 0xC0) != 0x80) ++where.column;
    counted_offset_ = offset;
    counted_ = where;
    return where;
  }

  [[noreturn]] void error(size_t offset, const std::string& message) const {
    fail_at(source_name_, location(offset), message);
  }

  // The whitespace (Python's \s, Unicode included) that starts at `pos`: its length in bytes, or 0.
  size_t whitespace_length(size_t pos) const {
    size_t end = pos;
    while (end < source_.size()) {
      const uint8_t byte = uint8_t(source_[end]);
      if (byte < 0x80) {
        if (!py::is_space(byte)) break;
        ++end;
        continue;
      }
      size_t next = end + 1;
      while (next < source_.size() && (uint8_t(source_[next]) & 0xC0) == 0x80) ++next;
      const std::u32string c = py::decode(source_.substr(end, next - end));
      if (c.size() != 1 || !py::is_space(c[0])) break;
      end = next;
    }
    return end - pos;
  }
  size_t skip_whitespace(size_t pos) const { return pos + whitespace_length(pos); }

  void emit_text(size_t begin, size_t end) {
    if (end > begin)
      tokens_.push_back({TokenKind::kText, std::string(source_.substr(begin, end - begin)), location(begin)});
  }

  // Where the text before a tag ends once the tag's left whitespace control is applied: `-` strips all whitespace
  // before it; otherwise lstrip_blocks drops the spaces between the start of the line and a block or comment tag
  // (a variable tag, or `+`, keeps them).
  size_t text_end_before_tag(size_t text_begin, size_t tag, char sign, bool is_variable) const {
    const std::string_view text = source_.substr(text_begin, tag - text_begin);
    if (sign == '-') {
      return text_begin + py::strip(text, std::nullopt, false, true).size();
    }
    if (sign == '+' || is_variable) return tag;
    const size_t newline = text.rfind('\n');
    const size_t line_begin = newline == std::string_view::npos ? 0 : newline + 1;
    if ((newline == std::string_view::npos && !line_starting_) || line_begin == text.size()) return tag;
    if (whitespace_length(text_begin + line_begin) == text.size() - line_begin) return text_begin + line_begin;
    return tag;
  }

  // The data up to the next tag, then the tag; returns the position after it.
  size_t lex_data_and_tag(size_t pos) {
    size_t tag = pos;
    TagKind kind = TagKind::kVariable;
    for (;; ++tag) {
      tag = source_.find('{', tag);
      if (tag == std::string_view::npos || tag + 1 >= source_.size()) {
        emit_text(pos, source_.size());
        return source_.size();
      }
      const char next = source_[tag + 1];
      if (next == '{' || next == '%' || next == '#') {
        kind = next == '{' ? TagKind::kVariable : next == '%' ? TagKind::kBlock : TagKind::kComment;
        break;
      }
    }
    const char sign =
        (tag + 2 < source_.size() && (source_[tag + 2] == '-' || source_[tag + 2] == '+')) ? source_[tag + 2] : '\0';
    emit_text(pos, text_end_before_tag(pos, tag, sign, kind == TagKind::kVariable));
    const size_t inside = tag + 2 + (sign ? 1 : 0);
    size_t after = 0;
    if (kind == TagKind::kComment) {
      after = lex_comment(tag, inside);
    } else if (kind == TagKind::kBlock && raw_tag_end(inside) != 0) {
      after = lex_raw(tag, raw_tag_end(inside));
    } else {
      after = lex_tag(tag, inside, kind);
    }
    line_starting_ = after > 0 && source_[after - 1] == '\n';
    return after;
  }

  // After the closing "}}", "%}" or "#}" at `close`: `-` before it eats all following whitespace, `+` nothing, and
  // otherwise a block or comment tag eats one newline (trim_blocks).
  size_t after_tag_end(size_t close, size_t marker_length, char sign, bool trim_newline) const {
    size_t after = close + marker_length;
    if (sign == '-') return skip_whitespace(after);
    if (sign != '+' && trim_newline && after < source_.size() && source_[after] == '\n') ++after;
    return after;
  }

  size_t lex_comment(size_t tag, size_t inside) const {
    const size_t close = source_.find("#}", inside);
    if (close == std::string_view::npos) error(tag, "the comment is never closed (missing '#}')");
    const char sign =
        (close > inside && (source_[close - 1] == '-' || source_[close - 1] == '+')) ? source_[close - 1] : '\0';
    return after_tag_end(close, 2, sign, true);
  }

  // "{% raw %}": when the tag at `inside` is one, the position after it, else 0. As in Jinja, no trim_blocks here.
  size_t raw_tag_end(size_t inside) const {
    size_t pos = skip_whitespace(inside);
    if (source_.substr(pos, 3) != "raw" || (pos + 3 < source_.size() && is_name_char(source_[pos + 3]))) return 0;
    pos = skip_whitespace(pos + 3);
    if (source_.substr(pos, 3) == "-%}") return skip_whitespace(pos + 3);
    if (source_.substr(pos, 2) == "%}") return pos + 2;
    return 0;
  }

  size_t lex_raw(size_t tag, size_t content_begin) {
    line_starting_ = source_[content_begin - 1] == '\n';
    for (size_t end_tag = source_.find("{%", content_begin); end_tag != std::string_view::npos;
         end_tag = source_.find("{%", end_tag + 2)) {
      const char sign = (end_tag + 2 < source_.size() && (source_[end_tag + 2] == '-' || source_[end_tag + 2] == '+'))
                            ? source_[end_tag + 2]
                            : '\0';
      size_t pos = skip_whitespace(end_tag + 2 + (sign ? 1 : 0));
      if (source_.substr(pos, 6) != "endraw") continue;
      pos = skip_whitespace(pos + 6);
      const char end_sign = (source_.substr(pos, 3) == "-%}" || source_.substr(pos, 3) == "+%}") ? source_[pos] : '\0';
      if (source_.substr(pos + (end_sign ? 1 : 0), 2) != "%}") continue;
      emit_text(content_begin, text_end_before_tag(content_begin, end_tag, sign, false));
      return after_tag_end(pos + (end_sign ? 1 : 0), 2, end_sign, true);
    }
    error(tag, "the raw block is never closed (missing '{% endraw %}')");
  }

  // The expression tokens of a {{ }} or {% %} tag, between its begin and end tokens.
  size_t lex_tag(size_t tag, size_t inside, TagKind kind) {
    const bool is_variable = kind == TagKind::kVariable;
    const std::string_view end_marker = is_variable ? "}}" : "%}";
    tokens_.push_back({is_variable ? TokenKind::kVariableBegin : TokenKind::kBlockBegin, "", location(tag)});
    std::vector<char> open_brackets;
    size_t pos = inside;
    while (true) {
      pos = skip_whitespace(pos);
      if (pos >= source_.size())
        error(tag, fmt::format("the {} tag is never closed (missing '{}')", is_variable ? "{{" : "{%", end_marker));
      // An end marker only closes the tag outside brackets, so that "{{ {'a': {'b': 1}} }}" reads as Jinja reads it.
      if (open_brackets.empty()) {
        const char sign = source_[pos];
        const bool signed_end =
            (sign == '-' || (sign == '+' && !is_variable)) && source_.substr(pos + 1, 2) == end_marker;
        if (signed_end || source_.substr(pos, 2) == end_marker) {
          const size_t close = signed_end ? pos + 1 : pos;
          tokens_.push_back({is_variable ? TokenKind::kVariableEnd : TokenKind::kBlockEnd, "", location(pos)});
          return after_tag_end(close, 2, signed_end ? sign : '\0', !is_variable);
        }
      }
      pos = lex_expression_token(pos, open_brackets);
    }
  }

  size_t lex_expression_token(size_t pos, std::vector<char>& open_brackets) {
    const char c = source_[pos];
    if (is_digit(c)) return lex_number(pos);
    if (is_name_start(c)) {
      size_t end = pos;
      while (end < source_.size() && is_name_char(source_[end])) ++end;
      tokens_.push_back({TokenKind::kName, std::string(source_.substr(pos, end - pos)), location(pos)});
      return end;
    }
    if (c == '\'' || c == '"') return lex_string(pos);
    for (const std::string_view op : kOperators) {
      if (source_.substr(pos, op.size()) != op) continue;
      if (op == "(" || op == "[" || op == "{") {
        open_brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (open_brackets.empty()) error(pos, fmt::format("unexpected '{}'", op));
        if (open_brackets.back() != op[0])
          error(pos, fmt::format("unexpected '{}', expected '{}'", op, open_brackets.back()));
        open_brackets.pop_back();
      }
      tokens_.push_back({TokenKind::kOperator, std::string(op), location(pos)});
      return pos + op.size();
    }
    error(pos, fmt::format("unexpected character '{}'", std::string(1, c)));
  }

  // Jinja's integer and float literals: digits with optional '_' separators, a float having a fraction, an
  // exponent or both ("1.5", "1e3", "2.5e-3"). No float right after a '.', so that "x.1.2" is x[1][2].
  size_t lex_number(size_t pos) {
    const auto digits_end = [&](size_t at) {
      while (at < source_.size() &&
             (is_digit(source_[at]) || (source_[at] == '_' && at + 1 < source_.size() && is_digit(source_[at + 1]))))
        ++at;
      return at;
    };
    size_t end = digits_end(pos);
    bool is_float = false;
    const bool after_dot = pos > 0 && source_[pos - 1] == '.';
    if (!after_dot && end + 1 < source_.size() && source_[end] == '.' && is_digit(source_[end + 1])) {
      end = digits_end(end + 1);
      is_float = true;
    }
    if (!after_dot && end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      size_t exponent = end + 1;
      if (exponent < source_.size() && (source_[exponent] == '+' || source_[exponent] == '-')) ++exponent;
      if (exponent < source_.size() && is_digit(source_[exponent])) {
        end = digits_end(exponent);
        is_float = true;
      }
    }
    std::string text(source_.substr(pos, end - pos));
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    tokens_.push_back({is_float ? TokenKind::kFloat : TokenKind::kInteger, text, location(pos)});
    return end;
  }

  size_t lex_string(size_t pos) {
    const char quote = source_[pos];
    size_t end = pos + 1;
    while (end < source_.size() && source_[end] != quote) end += source_[end] == '\\' ? 2 : 1;
    if (end >= source_.size()) error(pos, "the string literal is never closed");
    tokens_.push_back({TokenKind::kString, unescape(source_.substr(pos + 1, end - pos - 1), pos), location(pos)});
    return end + 1;
  }

  // Python's "unicode-escape" decoding, which Jinja applies to string literals: \n \t \\ \' \xNN \uNNNN \UNNNNNNNN
  // \ooo and the rest; an unknown escape such as "\d" stays as it is.
  std::string unescape(std::string_view body, size_t literal_pos) const {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\' || i + 1 >= body.size()) {
        out += body[i];
        continue;
      }
      const char e = body[++i];
      const auto hex = [&](size_t digits) {
        char32_t value = 0;
        for (size_t k = 1; k <= digits; ++k) {
          const char h = i + k < body.size() ? body[i + k] : '\0';
          const int digit = is_digit(h)              ? h - '0'
                            : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                            : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                     : -1;
          if (digit < 0) error(literal_pos, "truncated \\x, \\u or \\U escape in a string literal");
          value = value * 16 + char32_t(digit);
        }
        i += digits;
        return value;
      };
      switch (e) {
        case '\n':
          break;  // a backslash-newline continues the line
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          py::append_code_point(out, hex(2));
          break;
        case 'u':
          py::append_code_point(out, hex(4));
          break;
        case 'U':
          py::append_code_point(out, hex(8));
          break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t value = char32_t(e - '0');
            for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
              value = value * 8 + char32_t(body[++i] - '0');
            py::append_code_point(out, value);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }

  std::string_view source_;
  const std::string& source_name_;
  std::vector<Token> tokens_;
  mutable std::vector<size_t> line_starts_;  // offsets where lines begin, made on the first location() call
  mutable size_t counted_offset_ = 0;        // the offset of the last location() call, and its answer
  mutable SourceLocation counted_{1, 1};
  bool line_starting_ = true;                // the last tag ended a line, so text before the next tag starts one
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& source_name) {
  return Lexer(source, source_name).run();
}

}  // namespace moetune::text::jinja
