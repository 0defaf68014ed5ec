// The Jinja2 lexer, configured as transformers configures its chat-template environment: trim_blocks=True (the
// first newline after a block or comment tag is dropped), lstrip_blocks=True (spaces and tabs from the start of a
// line up to a block or comment tag are dropped), `-` / `+` whitespace control on either side of a tag, {% raw %},
// and keep_trailing_newline=False (one newline at the very end of the template is dropped).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "moetune/core/error.h"

namespace moetune::text::jinja {

struct SourceLocation {
  int line = 1;    // 1-based
  int column = 1;  // 1-based, in characters
};

// An Error raised while parsing or rendering a template; its message starts with "name:line:column: ".
class TemplateError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void fail_at(const std::string& source_name, SourceLocation location, const std::string& message);

enum class TokenKind {
  kText,           // template data between tags, whitespace control already applied
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,    // value: the literal with its escapes decoded
  kInteger,   // value: decimal digits
  kFloat,     // value: the literal without underscores
  kOperator,  // value: the operator's spelling ("//", "==", "(", ...)
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string value;
  SourceLocation location;
};

// Jinja normalises the template first: "\r\n" and "\r" become "\n", and one trailing newline is removed.
std::string normalize_template_source(std::string_view source);

// The tokens of a normalized template, ending with one kEnd. Errors name `source_name`, line and column.
std::vector<Token> tokenize(std::string_view source, const std::string& source_name);

}  // namespace moetune::text::jinja
