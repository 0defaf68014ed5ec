// A parsed Jinja2 template and its renderer: the subset of Jinja that Hugging Face chat templates use, rendered as
// transformers renders them (see jinja_lexer.h for the whitespace rules, jinja_builtins.h for filters and tests).
//
// Statements: if/elif/else, for (loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/cycle,
// `for k, v in ...` unpacking, `for x in xs if cond`, else), set (names, unpacking, namespace attributes, block
// set), macro with defaults and keyword arguments, call blocks with caller(), with, break/continue, and
// transformers' {% generation %}. Scoping is Jinja's: a for body is a new scope each iteration, a macro its own,
// an if none. Undefined behaves as Jinja's default Undefined: it prints as nothing, is false, iterates as empty,
// and looking something up on it or calling it is an Error.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moetune/text/jinja_budget.h"
#include "moetune/text/jinja_value.h"

namespace moetune::text::jinja {

struct Node;

// Where a {% generation %} block's output lies in a rendering: [begin, end) in bytes.
struct GenerationSpan {
  size_t begin = 0, end = 0;
};

class Template {
 public:
  // Parses `source`; `source_name` starts every error message ("chat_template.jinja:12:5: ...").
  Template(std::string_view source, std::string source_name);

  // Renders with `variables` in scope (they shadow the global functions range, namespace and dict). A render that
  // does more than `max_work` steps (jinja_budget.h) is an Error. `generation_spans`, when given, receives where
  // each {% generation %} block rendered, in the order the blocks ended (an inner block before the outer one).
  std::string render(const std::vector<std::pair<std::string, Value>>& variables, int64_t max_work = kMaxRenderWork,
                     std::vector<GenerationSpan>* generation_spans = nullptr) const;

  const std::string& source_name() const { return source_name_; }

 private:
  std::string source_name_;
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace moetune::text::jinja
