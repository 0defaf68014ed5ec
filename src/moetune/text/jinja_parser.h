// Tokens -> the statements and expressions of a template, with Jinja2's grammar and operator precedence (from
// loosest: inline if-else, or, and, not, comparisons and `in`, + -, ~, * / // %, **, unary - +, then filters `|`,
// tests `is`, calls, attributes and subscripts). A statement, filter or test this renderer does not implement is an
// Error naming it and its line:column, raised here rather than halfway through a render.
#pragma once

#include <string>
#include <vector>

#include "moetune/text/jinja_ast.h"
#include "moetune/text/jinja_lexer.h"

namespace moetune::text::jinja {

Body parse(const std::vector<Token>& tokens, const std::string& source_name);

}  // namespace moetune::text::jinja
