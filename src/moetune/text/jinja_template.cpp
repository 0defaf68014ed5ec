#include "moetune/text/jinja_template.h"

#include <unordered_map>

#include "moetune/text/jinja_ast.h"
#include "moetune/text/jinja_budget.h"
#include "moetune/text/jinja_builtins.h"
#include "moetune/text/jinja_lexer.h"
#include "moetune/text/jinja_parser.h"
#include "moetune/text/python_str.h"

namespace moetune::text::jinja {

namespace {

// Variables visible at one point of a render; lookups go outward through the parents.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}

  const Value* find(const std::string& name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent_.get()) {
      const auto found = scope->variables_.find(name);
      if (found != scope->variables_.end()) return &found->second;
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) { variables_[name] = std::move(value); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> variables_;
};
using ScopePtr = std::shared_ptr<Scope>;

std::shared_ptr<Scope> child_of(const ScopePtr& parent) { return std::make_shared<Scope>(parent); }

enum class Flow { kNormal, kBreak, kContinue };

// Deeper macro recursion than this is a runaway template (Python would stop near 1000 frames).
constexpr int kMaxCallDepth = 200;

class Renderer {
 public:
  Renderer(const std::string& source_name, int64_t max_work) : source_name_(source_name), budget_(max_work) {}

  // Records where {% generation %} blocks land in `out` (the whole rendering) into `spans`.
  void track_generation(const std::string& out, std::vector<GenerationSpan>& spans) {
    top_out_ = &out;
    generation_spans_ = &spans;
  }

  Flow render(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const NodePtr& node : body) {
      const Flow flow = render_node(*node, scope, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  // ---- statements ----

  Flow render_node(const Node& node, const ScopePtr& scope, std::string& out) {
    try {
      budget_.step();
      return std::visit([&](const auto& statement) { return render_statement(statement, node, scope, out); },
                        node.node);
    } catch (const TemplateError&) {
      throw;
    } catch (const Error& e) {
      fail_at(source_name_, node.location, e.what());
    }
  }

  Flow render_statement(const TextNode& text, const Node&, const ScopePtr&, std::string& out) {
    out += text.text;
    budget_.wrote(out);
    return Flow::kNormal;
  }

  Flow render_statement(const OutputNode& output, const Node&, const ScopePtr& scope, std::string& out) {
    out += to_str(eval(*output.expression, scope));
    budget_.wrote(out);
    return Flow::kNormal;
  }

  Flow render_statement(const IfNode& node, const Node&, const ScopePtr& scope, std::string& out) {
    for (const auto& [condition, body] : node.branches)
      if (truthy(eval(*condition, scope))) return render(body, scope, out);
    return render(node.otherwise, scope, out);
  }

  Flow render_statement(const ForNode& node, const Node&, const ScopePtr& scope, std::string& out) {
    std::vector<Value> items = iterate(eval(*node.iterable, scope));
    if (node.condition) {  // the loop filter sees the loop variable but no `loop`
      std::vector<Value> kept;
      for (Value& item : items) {
        const ScopePtr filter_scope = child_of(scope);
        assign(node.target, item, *filter_scope, scope);
        if (truthy(eval(*node.condition, filter_scope))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return render(node.otherwise, child_of(scope), out);
    const auto length = int64_t(items.size());
    for (int64_t index = 0; index < length; ++index) {
      budget_.step();  // an empty body costs nothing else, and range(99999) nested twice must still end
      const ScopePtr iteration = child_of(scope);  // a fresh scope per iteration: a set inside does not carry over
      assign(node.target, items[size_t(index)], *iteration, scope);
      iteration->set("loop", loop_object(items, index));
      if (render(node.body, iteration, out) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  static Value loop_object(const std::vector<Value>& items, int64_t index) {
    const auto length = int64_t(items.size());
    auto loop = std::make_shared<Namespace>();
    loop->set("index", Value::integer(index + 1));
    loop->set("index0", Value::integer(index));
    loop->set("revindex", Value::integer(length - index));
    loop->set("revindex0", Value::integer(length - index - 1));
    loop->set("first", Value::boolean(index == 0));
    loop->set("last", Value::boolean(index == length - 1));
    loop->set("length", Value::integer(length));
    loop->set("depth", Value::integer(1));
    loop->set("depth0", Value::integer(0));
    loop->set("previtem", index > 0 ? items[size_t(index - 1)] : Value::undefined("there is no previous item"));
    loop->set("nextitem", index + 1 < length ? items[size_t(index + 1)] : Value::undefined("there is no next item"));
    loop->set("cycle", Value::function("loop.cycle", [index](const Arguments& arguments) {
                if (arguments.positional.empty()) fail("loop.cycle() needs at least one item");
                return arguments.positional[size_t(index) % arguments.positional.size()];
              }));
    return Value::make_namespace(std::move(loop));
  }

  Flow render_statement(const SetNode& node, const Node&, const ScopePtr& scope, std::string&) {
    if (node.value) {
      assign(node.target, eval(*node.value, scope), *scope, scope);
    } else {
      std::string captured;
      render(node.body, child_of(scope), captured);
      assign(node.target, Value::string(std::move(captured)), *scope, scope);
    }
    return Flow::kNormal;
  }

  // Binds `value` to `target` in `into`; a namespace attribute is looked up from `lookup`.
  static void assign(const AssignTarget& target, const Value& value, Scope& into, const ScopePtr& lookup) {
    if (!target.attribute.empty()) {
      const Value* object = lookup->find(target.names[0]);
      if (object == nullptr || object->kind() != Value::Kind::kNamespace)
        fail("cannot assign attribute '{}' on '{}': it is not a namespace()", target.attribute, target.names[0]);
      object->as_namespace().set(target.attribute, value);
      return;
    }
    if (target.names.size() == 1) {
      into.set(target.names[0], value);
      return;
    }
    const std::vector<Value> parts = iterate(value);
    if (parts.size() != target.names.size())
      fail("cannot unpack {} value(s) into {} names", parts.size(), target.names.size());
    for (size_t i = 0; i < parts.size(); ++i) into.set(target.names[i], parts[i]);
  }

  Flow render_statement(const MacroNode& node, const Node&, const ScopePtr& scope, std::string&) {
    // The macro keeps a weak reference to the scope it was defined in (which holds the macro): a strong one would
    // be a reference cycle.
    std::weak_ptr<Scope> defined_in = scope;
    scope->set(node.name, Value::function(node.name, [this, &node, defined_in](const Arguments& arguments) {
                 return call_macro(node, defined_in, arguments);
               }));
    return Flow::kNormal;
  }

  Flow render_statement(const CallBlockNode& node, const Node&, const ScopePtr& scope, std::string& out) {
    std::weak_ptr<Scope> call_site = scope;
    const Value caller = Value::function("caller", [this, &node, call_site](const Arguments& arguments) {
      return call_macro(node.caller, call_site, arguments);
    });
    const auto& call = std::get<CallExpr>(node.call->node);
    const Value callee = eval(*call.callee, scope);
    Arguments arguments = eval_arguments(call.arguments, scope);
    arguments.keyword.emplace_back("caller", caller);
    out += to_str(invoke(callee, arguments));
    return Flow::kNormal;
  }

  Flow render_statement(const WithNode& node, const Node&, const ScopePtr& scope, std::string& out) {
    const ScopePtr inner = child_of(scope);
    for (const auto& [name, value] : node.assignments) inner->set(name, eval(*value, scope));
    return render(node.body, inner, out);
  }

  Flow render_statement(const LoopControlNode& node, const Node&, const ScopePtr&, std::string&) {
    return node.is_break ? Flow::kBreak : Flow::kContinue;
  }

  // As transformers' AssistantTracker: the block's place in the text rendered so far. A block rendered into
  // something else (a macro's result, a block set) is not recorded: there transformers' offsets do not point at it.
  Flow render_statement(const GenerationNode& node, const Node&, const ScopePtr& scope, std::string& out) {
    const size_t begin = out.size();
    const Flow flow = render(node.body, scope, out);
    if (generation_spans_ && &out == top_out_) generation_spans_->push_back({begin, out.size()});
    return flow;
  }

  // A macro (or a call block's caller) called with `arguments`: parameters bind by position then by name, missing
  // ones take their default or are Undefined; extra positional arguments are `varargs`, unknown keyword ones
  // `kwargs` (each allowed only when the body uses it), and a `caller` keyword is the call block's body.
  Value call_macro(const MacroNode& macro, const std::weak_ptr<Scope>& defined_in, const Arguments& arguments) {
    const std::string& name = macro.name;
    const std::vector<MacroParameter>& parameters = macro.parameters;
    const ScopePtr parent = defined_in.lock();
    if (!parent) fail("macro '{}' was called after the scope that defined it ended", name);
    if (depth_ >= kMaxCallDepth) fail("macro '{}': calls nested deeper than {}", name, kMaxCallDepth);
    const ScopePtr scope = child_of(parent);
    std::vector<bool> bound(parameters.size(), false);
    std::vector<Value> varargs;
    for (size_t i = 0; i < arguments.positional.size(); ++i) {
      if (i < parameters.size()) {
        scope->set(parameters[i].name, arguments.positional[i]);
        bound[i] = true;
      } else if (macro.takes_varargs) {
        varargs.push_back(arguments.positional[i]);
      } else {
        fail("macro '{}' takes not more than {} argument(s)", name, parameters.size());
      }
    }
    Json kwargs = Json::object();
    for (const auto& [key, value] : arguments.keyword) {
      const auto parameter =
          std::find_if(parameters.begin(), parameters.end(), [&](const MacroParameter& p) { return p.name == key; });
      if (parameter != parameters.end()) {
        const auto index = size_t(parameter - parameters.begin());
        if (bound[index]) fail("macro '{}' got multiple values for argument '{}'", name, key);
        scope->set(key, value);
        bound[index] = true;
      } else if (key == "caller") {
        scope->set("caller", value);
      } else if (macro.takes_kwargs) {
        kwargs[key] = value.to_json();
      } else {
        fail("macro '{}' takes no keyword argument '{}'", name, key);
      }
    }
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (bound[i]) continue;
      scope->set(parameters[i].name, parameters[i].default_value
                                         ? eval(*parameters[i].default_value, scope)
                                         : Value::undefined("parameter '" + parameters[i].name + "' was not provided"));
    }
    scope->set("varargs", Value::list(varargs));
    scope->set("kwargs", Value::json(std::move(kwargs)));
    std::string out;
    ++depth_;
    try {
      render(macro.body, scope, out);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    return Value::string(std::move(out));
  }

  // ---- expressions ----

  Value eval(const Expr& expr, const ScopePtr& scope) {
    try {
      budget_.step();
      return std::visit([&](const auto& node) { return eval_node(node, scope); }, expr.node);
    } catch (const TemplateError&) {
      throw;
    } catch (const Error& e) {
      fail_at(source_name_, expr.location, e.what());
    }
  }

  Value eval_node(const Literal& node, const ScopePtr&) { return node.value; }

  Value eval_node(const ListLiteral& node, const ScopePtr& scope) {
    std::vector<Value> items;
    for (const ExprPtr& item : node.items) items.push_back(eval(*item, scope));
    return built(Value::list(items));
  }

  Value eval_node(const DictLiteral& node, const ScopePtr& scope) {
    Json object = Json::object();
    for (const auto& [key_expr, value_expr] : node.items) {
      const Value key = eval(*key_expr, scope);
      if (!key.is_string()) fail("dict keys must be strings here, got {}", type_description(key));
      object[key.as_string()] = eval(*value_expr, scope).to_json();
    }
    return built(Value::json(std::move(object)));
  }

  Value eval_node(const Name& node, const ScopePtr& scope) {
    const Value* value = scope->find(node.name);
    return value ? *value : Value::undefined("'" + node.name + "' is undefined");
  }

  Value eval_node(const GetAttr& node, const ScopePtr& scope) {
    return get_attribute(eval(*node.object, scope), node.attribute);
  }

  Value eval_node(const GetItem& node, const ScopePtr& scope) {
    const Value object = eval(*node.object, scope);
    return get_item(object, eval(*node.index, scope));
  }

  Value eval_node(const SliceExpr& node, const ScopePtr& scope) {
    const Value object = eval(*node.object, scope);
    const auto bound = [&](const ExprPtr& expr) -> std::optional<int64_t> {
      if (!expr) return std::nullopt;
      const Value value = eval(*expr, scope);
      if (value.is_none()) return std::nullopt;
      return value.as_integer();
    };
    const std::optional<int64_t> start = bound(node.start), stop = bound(node.stop), step = bound(node.step);
    if (object.is_string()) {
      const std::u32string text = py::decode(object.as_string());
      std::u32string sliced;
      for (const size_t i : py::slice_indices(text.size(), start, stop, step)) sliced += text[i];
      return Value::string(py::encode(sliced));
    }
    if (object.is_list()) {
      Json items = Json::array();
      for (const size_t i : py::slice_indices(object.size(), start, stop, step)) items.push_back(object.data()[i]);
      return Value::json(std::move(items));
    }
    if (object.is_undefined()) fail("{}", object.undefined_reason());
    fail("{} cannot be sliced", type_description(object));
  }

  Arguments eval_arguments(const CallArguments& node, const ScopePtr& scope) {
    Arguments arguments;
    for (const ExprPtr& argument : node.positional) arguments.positional.push_back(eval(*argument, scope));
    for (const auto& [name, argument] : node.keyword) arguments.keyword.emplace_back(name, eval(*argument, scope));
    return arguments;
  }

  static Value invoke(const Value& callee, const Arguments& arguments) {
    if (callee.is_undefined()) fail("{}", callee.undefined_reason());
    return callee.as_function()(arguments);
  }

  Value eval_node(const CallExpr& node, const ScopePtr& scope) {
    const Value callee = eval(*node.callee, scope);
    return invoke(callee, eval_arguments(node.arguments, scope));
  }

  Value eval_node(const FilterExpr& node, const ScopePtr& scope) {
    const Value operand = eval(*node.operand, scope);
    return apply_filter(node.name, operand, eval_arguments(node.arguments, scope));
  }

  Value eval_node(const TestExpr& node, const ScopePtr& scope) {
    const Value operand = eval(*node.operand, scope);
    return Value::boolean(apply_test(node.name, operand, eval_arguments(node.arguments, scope)) != node.negated);
  }

  Value eval_node(const UnaryExpr& node, const ScopePtr& scope) {
    const Value operand = eval(*node.operand, scope);
    if (node.op == "not") return Value::boolean(!truthy(operand));
    return node.op == "-" ? negate(operand) : unary_plus(operand);
  }

  Value eval_node(const BinaryExpr& node, const ScopePtr& scope) {
    // and / or return an operand, as in Python: `x or []` is x when x is truthy.
    if (node.op == "and" || node.op == "or") {
      Value left = eval(*node.left, scope);
      if (truthy(left) == (node.op == "or")) return left;
      return eval(*node.right, scope);
    }
    const Value left = eval(*node.left, scope);
    const Value right = eval(*node.right, scope);
    if (node.op == "~") return built(Value::string(to_str(left) + to_str(right)));
    return built(arithmetic(node.op, left, right));
  }

  Value eval_node(const CompareExpr& node, const ScopePtr& scope) {
    Value left = eval(*node.first, scope);
    for (const auto& [op, right_expr] : node.rest) {
      Value right = eval(*right_expr, scope);
      bool holds = false;
      if (op == "==")
        holds = equal(left, right);
      else if (op == "!=")
        holds = !equal(left, right);
      else if (op == "<")
        holds = compare(left, right) < 0;
      else if (op == "<=")
        holds = compare(left, right) <= 0;
      else if (op == ">")
        holds = compare(left, right) > 0;
      else if (op == ">=")
        holds = compare(left, right) >= 0;
      else if (op == "in")
        holds = contains(right, left);
      else
        holds = !contains(right, left);  // "not in"
      if (!holds) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  Value eval_node(const ConditionalExpr& node, const ScopePtr& scope) {
    if (truthy(eval(*node.condition, scope))) return eval(*node.then, scope);
    if (node.otherwise) return eval(*node.otherwise, scope);
    return Value::undefined("the inline if-expression had no else branch");
  }

  // `value`, once charged to the budget.
  Value built(Value value) {
    budget_.built(value);
    return value;
  }

  const std::string& source_name_;
  int depth_ = 0;  // macro calls in progress
  RenderBudget budget_;
  const std::string* top_out_ = nullptr;                   // the whole rendering
  std::vector<GenerationSpan>* generation_spans_ = nullptr;  // where {% generation %} blocks go, when tracked
};

}  // namespace

Template::Template(std::string_view source, std::string source_name) : source_name_(std::move(source_name)) {
  const std::string normalized = normalize_template_source(source);
  body_ = std::make_shared<const Body>(parse(tokenize(normalized, source_name_), source_name_));
}

std::string Template::render(const std::vector<std::pair<std::string, Value>>& variables, int64_t max_work,
                             std::vector<GenerationSpan>* generation_spans) const {
  // Global functions, then the caller's variables, then the template's own top-level `set`s, each shadowing the last.
  const auto globals = std::make_shared<Scope>(nullptr);
  for (auto& [name, function] : global_functions()) globals->set(name, std::move(function));
  const auto context = child_of(globals);
  for (const auto& [name, value] : variables) context->set(name, value);
  const auto top = child_of(context);
  std::string out;
  Renderer renderer(source_name_, max_work);
  if (generation_spans) renderer.track_generation(out, *generation_spans);
  renderer.render(*body_, top, out);
  return out;
}

}  // namespace moetune::text::jinja
