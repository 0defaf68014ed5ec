// The parsed form of a template: expressions and statements, each with the place it was written, so that a
// runtime error can name its line and column.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "moetune/text/jinja_lexer.h"
#include "moetune/text/jinja_value.h"

namespace moetune::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallArguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Literal {
  Value value;
};
struct ListLiteral {  // [a, b] and tuples (a, b), which Jinja code uses alike
  std::vector<ExprPtr> items;
};
struct DictLiteral {
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct Name {
  std::string name;
};
struct GetAttr {  // object.attribute
  ExprPtr object;
  std::string attribute;
};
struct GetItem {  // object[index]
  ExprPtr object;
  ExprPtr index;
};
struct SliceExpr {  // object[start:stop:step], any part optional
  ExprPtr object;
  ExprPtr start, stop, step;
};
struct CallExpr {
  ExprPtr callee;
  CallArguments arguments;
};
struct FilterExpr {  // operand | name(arguments)
  ExprPtr operand;
  std::string name;
  CallArguments arguments;
};
struct TestExpr {  // operand is [not] name(arguments)
  ExprPtr operand;
  std::string name;
  CallArguments arguments;
  bool negated = false;
};
struct UnaryExpr {  // "not", "-" or "+"
  std::string op;
  ExprPtr operand;
};
struct BinaryExpr {  // "and", "or", "~", "+", "-", "*", "/", "//", "%", "**"
  std::string op;
  ExprPtr left, right;
};
struct CompareExpr {  // a < b <= c: chained as in Python; ops "==", "!=", "<", "<=", ">", ">=", "in", "not in"
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> rest;
};
struct ConditionalExpr {  // then if condition else otherwise; no else: Undefined
  ExprPtr condition, then, otherwise;
};

struct Expr {
  SourceLocation location;
  int depth = 1;  // of the tree under this node: the renderer recurses once per level
  std::variant<Literal, ListLiteral, DictLiteral, Name, GetAttr, GetItem, SliceExpr, CallExpr, FilterExpr, TestExpr,
               UnaryExpr, BinaryExpr, CompareExpr, ConditionalExpr>
      node;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// What a set or for assigns to: one name, several to unpack into, or a namespace attribute (ns.attr).
struct AssignTarget {
  std::vector<std::string> names;
  std::string attribute;  // non-empty: names[0] is a namespace and this its attribute
};

struct TextNode {
  std::string text;
};
struct OutputNode {  // {{ expression }}
  ExprPtr expression;
};
struct IfNode {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if and each elif
  Body otherwise;
};
struct ForNode {
  AssignTarget target;
  ExprPtr iterable;
  ExprPtr condition;  // for x in y if condition
  Body body;
  Body otherwise;  // rendered when nothing was iterated
};
struct SetNode {
  AssignTarget target;
  ExprPtr value;  // null for a block set: {% set x %}body{% endset %}
  Body body;
};
struct MacroParameter {
  std::string name;
  ExprPtr default_value;  // may be null
};
struct MacroNode {
  std::string name;
  std::vector<MacroParameter> parameters;
  Body body;
  // Whether the body mentions `varargs` / `kwargs`: as in Jinja, only then may a call pass extra positional /
  // unknown keyword arguments.
  bool takes_varargs = false;
  bool takes_kwargs = false;
};
struct CallBlockNode {  // {% call(params) macro(args) %}body{% endcall %}: the body is the macro's caller()
  MacroNode caller;
  ExprPtr call;
};
struct WithNode {  // {% with a = 1 %}body{% endwith %}: a scope of its own
  std::vector<std::pair<std::string, ExprPtr>> assignments;
  Body body;
};
struct LoopControlNode {
  bool is_break = false;
};
struct GenerationNode {  // transformers' {% generation %} block: its body rendered as it is, its place recorded
  Body body;
};

struct Node {
  SourceLocation location;
  std::variant<TextNode, OutputNode, IfNode, ForNode, SetNode, MacroNode, CallBlockNode, WithNode, LoopControlNode,
               GenerationNode>
      node;
};

}  // namespace moetune::text::jinja
