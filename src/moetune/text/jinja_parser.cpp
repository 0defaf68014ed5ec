#include "moetune/text/jinja_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <initializer_list>

#include "moetune/text/jinja_builtins.h"

namespace moetune::text::jinja {

namespace {

// Jinja statements this renderer leaves out, so that using one says so instead of "unknown statement".
constexpr std::string_view kUnsupportedStatements[] = {"block", "extends",   "include",    "import",
                                                       "from",  "filter",    "autoescape", "do",
                                                       "trans", "pluralize", "print",      "recursive"};

// Parsing, rendering and destroying a template recurse once per level of nesting, so a downloaded template of
// 3,000 parentheses or 100,000 `|lower` would overflow the stack; real chat templates nest a dozen levels.
constexpr int kMaxNesting = 200;

int depth_of(const ExprPtr& expr) { return expr ? expr->depth : 0; }
int depth_of(const CallArguments& arguments) {
  int depth = 0;
  for (const ExprPtr& argument : arguments.positional) depth = std::max(depth, depth_of(argument));
  for (const auto& [name, argument] : arguments.keyword) depth = std::max(depth, depth_of(argument));
  return depth;
}
template <typename... Parts>
int deepest(const Parts&... parts) {
  return std::max({0, depth_of(parts)...});
}

// The depth of the deepest expression directly under `node`.
int children_depth(const Literal&) { return 0; }
int children_depth(const Name&) { return 0; }
int children_depth(const ListLiteral& node) {
  int depth = 0;
  for (const ExprPtr& item : node.items) depth = std::max(depth, depth_of(item));
  return depth;
}
int children_depth(const DictLiteral& node) {
  int depth = 0;
  for (const auto& [key, value] : node.items) depth = std::max(depth, deepest(key, value));
  return depth;
}
int children_depth(const GetAttr& node) { return deepest(node.object); }
int children_depth(const GetItem& node) { return deepest(node.object, node.index); }
int children_depth(const SliceExpr& node) { return deepest(node.object, node.start, node.stop, node.step); }
int children_depth(const CallExpr& node) { return deepest(node.callee, node.arguments); }
int children_depth(const FilterExpr& node) { return deepest(node.operand, node.arguments); }
int children_depth(const TestExpr& node) { return deepest(node.operand, node.arguments); }
int children_depth(const UnaryExpr& node) { return deepest(node.operand); }
int children_depth(const BinaryExpr& node) { return deepest(node.left, node.right); }
int children_depth(const CompareExpr& node) {
  int depth = depth_of(node.first);
  for (const auto& [op, operand] : node.rest) depth = std::max(depth, depth_of(operand));
  return depth;
}
int children_depth(const ConditionalExpr& node) { return deepest(node.condition, node.then, node.otherwise); }

template <typename T>
NodePtr make_node(SourceLocation location, T node) {
  auto result = std::make_unique<Node>();
  result->location = location;
  result->node = std::move(node);
  return result;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& source_name)
      : tokens_(tokens), source_name_(source_name) {}

  Body parse_template() {
    Body body = parse_body({}, "");
    return body;
  }

 private:
  template <typename T>
  ExprPtr make_expr(SourceLocation location, T node) {
    auto expr = std::make_unique<Expr>();
    expr->location = location;
    expr->depth = 1 + children_depth(node);
    // Chains (a|f|f|f..., a.b.c..., 1+1+1...) deepen the tree without deepening the parser's recursion.
    if (expr->depth > kMaxNesting) fail_at(source_name_, location, fmt::format("expression nested deeper than {} levels", kMaxNesting));
    expr->node = std::move(node);
    return expr;
  }

  // Counts the parser's own recursion (parentheses, brackets, `not`, signs, statements inside statements).
  class NestingGuard {
   public:
    NestingGuard(Parser& parser) : parser_(parser) {
      if (++parser_.nesting_ > kMaxNesting)
        parser_.error(parser_.current(), fmt::format("nested deeper than {} levels", kMaxNesting));
    }
    ~NestingGuard() { --parser_.nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

   private:
    Parser& parser_;
  };

  // ---- token stream ----

  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool at_operator(std::string_view op) const {
    return current().kind == TokenKind::kOperator && current().value == op;
  }
  bool at_name(std::string_view name) const { return current().kind == TokenKind::kName && current().value == name; }
  bool at_end_of_tag() const {
    return current().kind == TokenKind::kBlockEnd || current().kind == TokenKind::kVariableEnd;
  }

  [[noreturn]] void error(const Token& token, const std::string& message) const {
    fail_at(source_name_, token.location, message);
  }

  static std::string describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::kText:
        return "template text";
      case TokenKind::kVariableBegin:
        return "'{{'";
      case TokenKind::kVariableEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kName:
        return "'" + token.value + "'";
      case TokenKind::kString:
        return "a string";
      case TokenKind::kInteger:
      case TokenKind::kFloat:
        return "the number " + token.value;
      case TokenKind::kOperator:
        return "'" + token.value + "'";
      case TokenKind::kEnd:
        return "the end of the template";
    }
    return "a token";
  }

  void expect_operator(std::string_view op) {
    if (!at_operator(op)) error(current(), fmt::format("expected '{}', found {}", op, describe(current())));
    advance();
  }
  const Token& expect_name() {
    if (current().kind != TokenKind::kName)
      error(current(), fmt::format("expected a name, found {}", describe(current())));
    return advance();
  }
  void expect_name(std::string_view name) {
    if (!at_name(name)) error(current(), fmt::format("expected '{}', found {}", name, describe(current())));
    advance();
  }
  void expect_block_end() {
    if (current().kind != TokenKind::kBlockEnd)
      error(current(), fmt::format("expected '%}}', found {}", describe(current())));
    advance();
  }

  // ---- statements ----

  // Nodes until a {% tag %} whose name is one of `end_names`; returns with that name as the current token. At the
  // end of the template that is an error naming the statement `opener` that was never closed.
  Body parse_body(std::initializer_list<std::string_view> end_names, std::string_view closing_hint,
                  const Token* opener = nullptr) {
    const NestingGuard guard(*this);
    Body body;
    while (true) {
      const Token& token = current();
      switch (token.kind) {
        case TokenKind::kEnd:
          if (end_names.size() != 0)
            error(*opener, fmt::format("'{}' is never closed (expected {})", opener->value, closing_hint));
          return body;
        case TokenKind::kText:
          body.push_back(make_node(token.location, TextNode{token.value}));
          advance();
          break;
        case TokenKind::kVariableBegin: {
          advance();
          ExprPtr expression = parse_tuple();
          if (current().kind != TokenKind::kVariableEnd)
            error(current(), fmt::format("expected '}}}}', found {}", describe(current())));
          advance();
          body.push_back(make_node(token.location, OutputNode{std::move(expression)}));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = peek();
          if (name.kind != TokenKind::kName) error(name, fmt::format("expected a statement, found {}", describe(name)));
          if (std::find(end_names.begin(), end_names.end(), name.value) != end_names.end()) {
            advance();
            return body;
          }
          advance();
          body.push_back(parse_statement());
          break;
        }
        default:
          error(token, fmt::format("unexpected {}", describe(token)));
      }
    }
  }

  NodePtr parse_statement() {
    const Token& keyword = current();
    const std::string& name = keyword.value;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "with") return parse_with();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) error(keyword, fmt::format("'{}' outside a for loop", name));
      advance();
      expect_block_end();
      return make_node(keyword.location, LoopControlNode{name == "break"});
    }
    if (name == "generation") {  // transformers' extension marking assistant text; it renders its body as it is
      advance();
      expect_block_end();
      Body body = parse_body({"endgeneration"}, "'{% endgeneration %}'", &keyword);
      advance();
      expect_block_end();
      return make_node(keyword.location, GenerationNode{std::move(body)});
    }
    if (std::find(std::begin(kUnsupportedStatements), std::end(kUnsupportedStatements), name) !=
        std::end(kUnsupportedStatements))
      error(keyword, fmt::format("statement '{}' is not supported", name));
    if (name == "elif" || name == "else" || name.rfind("end", 0) == 0)
      error(keyword, fmt::format("unexpected '{}' (no open statement it belongs to)", name));
    error(keyword, fmt::format("statement '{}' is not supported", name));
  }

  NodePtr parse_if() {
    const Token& keyword = advance();
    IfNode node;
    ExprPtr condition = parse_expression();
    expect_block_end();
    Body body = parse_body({"elif", "else", "endif"}, "'{% endif %}'", &keyword);
    node.branches.emplace_back(std::move(condition), std::move(body));
    while (true) {
      const std::string branch = advance().value;
      if (branch == "elif") {
        ExprPtr elif_condition = parse_expression();
        expect_block_end();
        Body elif_body = parse_body({"elif", "else", "endif"}, "'{% endif %}'", &keyword);
        node.branches.emplace_back(std::move(elif_condition), std::move(elif_body));
      } else if (branch == "else") {
        expect_block_end();
        node.otherwise = parse_body({"endif"}, "'{% endif %}'", &keyword);
      } else {
        expect_block_end();
        break;
      }
    }
    return make_node(keyword.location, std::move(node));
  }

  NodePtr parse_for() {
    const Token& keyword = advance();
    ForNode node;
    node.target = parse_assign_target(false);
    expect_name("in");
    node.iterable = parse_tuple(false);  // no inline if here: `if` starts the loop filter
    if (at_name("if")) {
      advance();
      node.condition = parse_expression();
    }
    if (at_name("recursive")) error(current(), "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    node.body = parse_body({"else", "endfor"}, "'{% endfor %}'", &keyword);
    --loop_depth_;
    if (advance().value == "else") {
      expect_block_end();
      node.otherwise = parse_body({"endfor"}, "'{% endfor %}'", &keyword);
      advance();
    }
    expect_block_end();
    return make_node(keyword.location, std::move(node));
  }

  AssignTarget parse_assign_target(bool allow_attribute) {
    AssignTarget target;
    target.names.push_back(expect_name().value);
    if (allow_attribute && at_operator(".")) {
      advance();
      target.attribute = expect_name().value;
      return target;
    }
    while (at_operator(",")) {
      advance();
      target.names.push_back(expect_name().value);
    }
    return target;
  }

  NodePtr parse_set() {
    const Token& keyword = advance();
    SetNode node;
    node.target = parse_assign_target(true);
    if (at_operator("=")) {
      advance();
      node.value = parse_tuple();
      expect_block_end();
    } else if (current().kind == TokenKind::kBlockEnd) {
      advance();
      node.body = parse_body({"endset"}, "'{% endset %}'", &keyword);
      advance();
      expect_block_end();
    } else if (at_operator("|")) {
      error(current(), "a filtered block set ({% set x | filter %}) is not supported");
    } else {
      error(current(), fmt::format("expected '=' or '%}}', found {}", describe(current())));
    }
    return make_node(keyword.location, std::move(node));
  }

  std::vector<MacroParameter> parse_parameters() {
    std::vector<MacroParameter> parameters;
    expect_operator("(");
    while (!at_operator(")")) {
      MacroParameter parameter;
      parameter.name = expect_name().value;
      if (at_operator("=")) {
        advance();
        parameter.default_value = parse_expression();
      }
      parameters.push_back(std::move(parameter));
      if (!at_operator(",")) break;
      advance();
    }
    expect_operator(")");
    return parameters;
  }

  NodePtr parse_macro() {
    const Token& keyword = advance();
    MacroNode node;
    node.name = expect_name().value;
    node.parameters = parse_parameters();
    expect_block_end();
    parse_macro_body(node, "endmacro", keyword);
    advance();
    if (current().kind == TokenKind::kName) advance();  // {% endmacro name %}
    expect_block_end();
    return make_node(keyword.location, std::move(node));
  }

  // A macro's (or call block's) body, and whether it mentions varargs or kwargs.
  void parse_macro_body(MacroNode& macro, std::string_view end_name, const Token& keyword) {
    const int outer_loop_depth = loop_depth_;
    loop_depth_ = 0;  // a macro's body is not inside the loops around its definition
    const size_t body_begin = pos_;
    macro.body = parse_body({end_name}, fmt::format("'{{% {} %}}'", end_name), &keyword);
    for (size_t i = body_begin; i < pos_; ++i) {
      if (tokens_[i].kind != TokenKind::kName) continue;
      macro.takes_varargs = macro.takes_varargs || tokens_[i].value == "varargs";
      macro.takes_kwargs = macro.takes_kwargs || tokens_[i].value == "kwargs";
    }
    loop_depth_ = outer_loop_depth;
  }

  NodePtr parse_call_block() {
    const Token& keyword = advance();
    CallBlockNode node;
    node.caller.name = "caller";
    if (at_operator("(")) node.caller.parameters = parse_parameters();
    node.call = parse_expression();
    if (!std::holds_alternative<CallExpr>(node.call->node)) error(keyword, "{% call %} needs a macro call");
    expect_block_end();
    parse_macro_body(node.caller, "endcall", keyword);
    advance();
    expect_block_end();
    return make_node(keyword.location, std::move(node));
  }

  NodePtr parse_with() {
    const Token& keyword = advance();
    WithNode node;
    while (current().kind != TokenKind::kBlockEnd) {
      std::string name = expect_name().value;
      expect_operator("=");
      node.assignments.emplace_back(std::move(name), parse_expression());
      if (!at_operator(",")) break;
      advance();
    }
    expect_block_end();
    node.body = parse_body({"endwith"}, "'{% endwith %}'", &keyword);
    advance();
    expect_block_end();
    return make_node(keyword.location, std::move(node));
  }

  // ---- expressions, loosest binding first ----

  // An expression, or several separated by commas (a tuple), as {{ }} and `set x =` accept.
  ExprPtr parse_tuple(bool with_condition = true) {
    const SourceLocation location = current().location;
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!at_operator(",")) return first;
    ListLiteral tuple;
    tuple.items.push_back(std::move(first));
    while (at_operator(",")) {
      advance();
      if (at_end_of_tag() || at_operator(")") || at_name("if")) break;
      tuple.items.push_back(with_condition ? parse_expression() : parse_or());
    }
    return make_expr(location, std::move(tuple));
  }

  ExprPtr parse_expression() {
    const NestingGuard guard(*this);
    const SourceLocation location = current().location;
    ExprPtr expr = parse_or();
    while (at_name("if")) {
      advance();
      ConditionalExpr conditional;
      conditional.condition = parse_or();
      conditional.then = std::move(expr);
      if (at_name("else")) {
        advance();
        conditional.otherwise = parse_expression();
      }
      expr = make_expr(location, std::move(conditional));
    }
    return expr;
  }

  ExprPtr parse_binary_chain(std::initializer_list<std::string_view> ops, bool ops_are_names,
                             ExprPtr (Parser::*operand)()) {
    const SourceLocation location = current().location;
    ExprPtr left = (this->*operand)();
    while (true) {
      const bool matches = std::any_of(
          ops.begin(), ops.end(), [&](std::string_view op) { return ops_are_names ? at_name(op) : at_operator(op); });
      if (!matches) return left;
      std::string op = advance().value;
      ExprPtr right = (this->*operand)();
      left = make_expr(location, BinaryExpr{std::move(op), std::move(left), std::move(right)});
    }
  }

  ExprPtr parse_or() { return parse_binary_chain({"or"}, true, &Parser::parse_and); }
  ExprPtr parse_and() { return parse_binary_chain({"and"}, true, &Parser::parse_not); }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const NestingGuard guard(*this);
      const SourceLocation location = advance().location;
      return make_expr(location, UnaryExpr{"not", parse_not()});
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const SourceLocation location = current().location;
    ExprPtr first = parse_math1();
    CompareExpr compare;
    while (true) {
      std::string op;
      if (current().kind == TokenKind::kOperator &&
          (current().value == "==" || current().value == "!=" || current().value == "<" || current().value == "<=" ||
           current().value == ">" || current().value == ">=")) {
        op = advance().value;
      } else if (at_name("in")) {
        advance();
        op = "in";
      } else if (at_name("not") && peek().kind == TokenKind::kName && peek().value == "in") {
        advance();
        advance();
        op = "not in";
      } else {
        break;
      }
      compare.rest.emplace_back(std::move(op), parse_math1());
    }
    if (compare.rest.empty()) return first;
    compare.first = std::move(first);
    return make_expr(location, std::move(compare));
  }

  ExprPtr parse_math1() { return parse_binary_chain({"+", "-"}, false, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_binary_chain({"~"}, false, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_binary_chain({"*", "/", "//", "%"}, false, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_binary_chain({"**"}, false, &Parser::parse_unary_with_filters); }
  ExprPtr parse_unary_with_filters() { return parse_unary(true); }

  // As in Jinja, `-x|f` is (-x)|f: the sign binds the bare operand, filters apply to the result.
  ExprPtr parse_unary(bool with_filters) {
    ExprPtr node;
    if (at_operator("-") || at_operator("+")) {
      const NestingGuard guard(*this);
      const Token& sign = advance();
      node = make_expr(sign.location, UnaryExpr{sign.value, parse_unary(false)});
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filters) node = parse_filters_and_tests(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    switch (token.kind) {
      case TokenKind::kName: {
        advance();
        if (token.value == "true" || token.value == "True")
          return make_expr(token.location, Literal{Value::boolean(true)});
        if (token.value == "false" || token.value == "False")
          return make_expr(token.location, Literal{Value::boolean(false)});
        if (token.value == "none" || token.value == "None") return make_expr(token.location, Literal{Value::none()});
        return make_expr(token.location, Name{token.value});
      }
      case TokenKind::kString: {
        std::string text;
        while (current().kind == TokenKind::kString) text += advance().value;  // "a" "b" is "ab", as in Python
        return make_expr(token.location, Literal{Value::string(std::move(text))});
      }
      case TokenKind::kInteger:
        advance();
        return make_expr(token.location, Literal{Value::integer(integer_value(token))});
      case TokenKind::kFloat: {
        advance();
        double value = 0;
        std::from_chars(token.value.data(), token.value.data() + token.value.size(), value);
        return make_expr(token.location, Literal{Value::number(value)});
      }
      case TokenKind::kOperator:
        if (token.value == "(") return parse_parenthesized();
        if (token.value == "[") return parse_list();
        if (token.value == "{") return parse_dict();
        break;
      default:
        break;
    }
    error(token, fmt::format("unexpected {}", describe(token)));
  }

  int64_t integer_value(const Token& token) const {
    int64_t value = 0;
    const auto result = std::from_chars(token.value.data(), token.value.data() + token.value.size(), value);
    if (result.ec != std::errc()) error(token, fmt::format("integer {} is out of range", token.value));
    return value;
  }

  ExprPtr parse_parenthesized() {
    const SourceLocation location = advance().location;
    if (at_operator(")")) {
      advance();
      return make_expr(location, ListLiteral{});  // () is the empty tuple
    }
    ExprPtr inner = parse_tuple();
    expect_operator(")");
    return inner;
  }

  ExprPtr parse_list() {
    const SourceLocation location = advance().location;
    ListLiteral list;
    while (!at_operator("]")) {
      list.items.push_back(parse_expression());
      if (!at_operator(",")) break;
      advance();
    }
    expect_operator("]");
    return make_expr(location, std::move(list));
  }

  ExprPtr parse_dict() {
    const SourceLocation location = advance().location;
    DictLiteral dict;
    while (!at_operator("}")) {
      ExprPtr key = parse_expression();
      expect_operator(":");
      dict.items.emplace_back(std::move(key), parse_expression());
      if (!at_operator(",")) break;
      advance();
    }
    expect_operator("}");
    return make_expr(location, std::move(dict));
  }

  // Attribute, subscript and call errors point at where the whole expression starts ("messages[0].role").
  ExprPtr parse_postfix(ExprPtr node) {
    const SourceLocation start = node->location;
    while (true) {
      if (at_operator(".")) {
        advance();
        const Token& attribute = current();
        if (attribute.kind == TokenKind::kName) {
          advance();
          node = make_expr(start, GetAttr{std::move(node), attribute.value});
        } else if (attribute.kind == TokenKind::kInteger) {  // x.0 is x[0]
          advance();
          ExprPtr index = make_expr(attribute.location, Literal{Value::integer(integer_value(attribute))});
          node = make_expr(start, GetItem{std::move(node), std::move(index)});
        } else {
          error(attribute, fmt::format("expected an attribute name after '.', found {}", describe(attribute)));
        }
      } else if (at_operator("[")) {
        node = parse_subscript(std::move(node));
        node->location = start;
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
        node->location = start;
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const SourceLocation location = advance().location;
    ExprPtr start;
    if (!at_operator(":")) {
      start = parse_expression();
      if (!at_operator(":")) {
        expect_operator("]");
        return make_expr(location, GetItem{std::move(object), std::move(start)});
      }
    }
    SliceExpr slice;
    slice.object = std::move(object);
    slice.start = std::move(start);
    advance();  // the first ':'
    if (!at_operator("]") && !at_operator(":")) slice.stop = parse_expression();
    if (at_operator(":")) {
      advance();
      if (!at_operator("]")) slice.step = parse_expression();
    }
    expect_operator("]");
    return make_expr(location, std::move(slice));
  }

  CallArguments parse_call_arguments() {
    CallArguments arguments;
    expect_operator("(");
    while (!at_operator(")")) {
      if (at_operator("*") || at_operator("**")) error(current(), "*args and **kwargs in calls are not supported");
      if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().value == "=") {
        std::string name = advance().value;
        advance();
        arguments.keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (!arguments.keyword.empty()) error(current(), "a positional argument after a keyword argument");
        arguments.positional.push_back(parse_expression());
      }
      if (!at_operator(",")) break;
      advance();
    }
    expect_operator(")");
    return arguments;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const SourceLocation location = current().location;
    CallArguments arguments = parse_call_arguments();
    return make_expr(location, CallExpr{std::move(callee), std::move(arguments)});
  }

  ExprPtr parse_filters_and_tests(ExprPtr node) {
    while (true) {
      if (at_operator("|")) {
        advance();
        const Token& name = expect_name();
        if (!is_supported_filter(name.value)) error(name, fmt::format("filter '{}' is not supported", name.value));
        FilterExpr filter{std::move(node), name.value, {}};
        if (at_operator("(")) filter.arguments = parse_call_arguments();
        node = make_expr(name.location, std::move(filter));
      } else if (at_name("is")) {
        advance();
        TestExpr test;
        if (at_name("not")) {
          advance();
          test.negated = true;
        }
        const Token& name = expect_name();
        if (!is_supported_test(name.value)) error(name, fmt::format("test '{}' is not supported", name.value));
        test.operand = std::move(node);
        test.name = name.value;
        if (at_operator("(")) {
          test.arguments = parse_call_arguments();
        } else if (takes_bare_test_argument()) {  // `x is divisibleby 3`, `x is sameas none`
          test.arguments.positional.push_back(parse_postfix(parse_primary()));
        }
        node = make_expr(name.location, std::move(test));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  bool takes_bare_test_argument() const {
    const Token& token = current();
    if (token.kind == TokenKind::kName) return token.value != "else" && token.value != "or" && token.value != "and";
    if (token.kind == TokenKind::kString || token.kind == TokenKind::kInteger || token.kind == TokenKind::kFloat)
      return true;
    return token.kind == TokenKind::kOperator && (token.value == "[" || token.value == "{");
  }

  const std::vector<Token>& tokens_;
  const std::string& source_name_;
  size_t pos_ = 0;
  int loop_depth_ = 0;  // for loops around the current position (break / continue need one)
  int nesting_ = 0;     // the parser's recursion, against kMaxNesting
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& source_name) {
  return Parser(tokens, source_name).parse_template();
}

}  // namespace moetune::text::jinja
