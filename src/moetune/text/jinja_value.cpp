#include "moetune/text/jinja_value.h"

#include <cmath>
#include <cstdint>

#include "moetune/core/error.h"
#include "moetune/text/python_str.h"

namespace moetune::text::jinja {

namespace {

Value::Kind kind_of(const Json& node) {
  switch (node.type()) {
    case Json::value_t::null:
      return Value::Kind::kNone;
    case Json::value_t::boolean:
      return Value::Kind::kBool;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return Value::Kind::kInt;
    case Json::value_t::number_float:
      return Value::Kind::kFloat;
    case Json::value_t::string:
      return Value::Kind::kString;
    case Json::value_t::array:
      return Value::Kind::kList;
    case Json::value_t::object:
      return Value::Kind::kDict;
    default:
      fail("a {} JSON value has no template equivalent", node.type_name());
  }
}

bool is_numeric(const Json& node) { return node.is_number() || node.is_boolean(); }

double numeric_value(const Json& node) {
  if (node.is_boolean()) return node.get<bool>() ? 1.0 : 0.0;
  return node.get<double>();
}

int64_t integer_value(const Json& node) {
  if (node.is_boolean()) return node.get<bool>() ? 1 : 0;
  if (node.is_number_unsigned() && node.get<uint64_t>() > uint64_t(INT64_MAX))
    fail("integer {} is beyond the 64 bits moetune's templates compute with", node.get<uint64_t>());
  return node.get<int64_t>();
}

// Python's type names, for the messages of its TypeErrors.
const char* python_type(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kFunction:
      return "function";
  }
  return "object";
}

bool json_equal(const Json& a, const Json& b) {
  if (is_numeric(a) && is_numeric(b)) {
    if (a.is_number_float() || b.is_number_float()) return numeric_value(a) == numeric_value(b);
    return integer_value(a) == integer_value(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!json_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      const auto other = b.find(it.key());
      if (other == b.end() || !json_equal(it.value(), *other)) return false;
    }
    return true;
  }
  return a == b;
}

std::string json_repr(const Json& node) {
  switch (node.type()) {
    case Json::value_t::null:
      return "None";
    case Json::value_t::boolean:
      return node.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer:
      return std::to_string(node.get<int64_t>());
    case Json::value_t::number_unsigned:
      return std::to_string(node.get<uint64_t>());
    case Json::value_t::number_float:
      return py::float_repr(node.get<double>());
    case Json::value_t::string:
      return py::repr(node.get_ref<const std::string&>());
    case Json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < node.size(); ++i) out += (i ? ", " : "") + json_repr(node[i]);
      return out + "]";
    }
    case Json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = node.begin(); it != node.end(); ++it, first = false)
        out += (first ? "" : ", ") + py::repr(it.key()) + ": " + json_repr(it.value());
      return out + "}";
    }
    default:
      return "<" + std::string(node.type_name()) + ">";
  }
}

std::string namespace_repr(const Namespace& ns) {
  std::string out = "<Namespace {";
  for (size_t i = 0; i < ns.attributes.size(); ++i)
    out += (i ? ", " : "") + py::repr(ns.attributes[i].first) + ": " + to_repr(ns.attributes[i].second);
  return out + "}>";
}

}  // namespace

Value Value::undefined(std::string reason) {
  Value value;
  value.text_ = std::move(reason);
  return value;
}

Value Value::none() { return json(Json(nullptr)); }
Value Value::boolean(bool value) { return json(Json(value)); }
Value Value::integer(int64_t value) { return json(Json(value)); }
Value Value::number(double value) { return json(Json(value)); }
Value Value::string(std::string value) { return json(Json(std::move(value))); }

Value Value::json(Json data) {
  auto document = std::make_shared<const Json>(std::move(data));
  const Json& node = *document;
  return view(std::move(document), node);
}

Value Value::view(std::shared_ptr<const Json> document, const Json& node) {
  Value value;
  value.kind_ = kind_of(node);
  value.document_ = std::move(document);
  value.node_ = &node;
  return value;
}

Value Value::list(const std::vector<Value>& items) {
  Json array = Json::array();
  for (const Value& item : items) array.push_back(item.to_json());
  return json(std::move(array));
}

Value Value::make_namespace(std::shared_ptr<Namespace> attributes) {
  Value value;
  value.kind_ = Kind::kNamespace;
  value.namespace_ = std::move(attributes);
  return value;
}

Value Value::function(std::string name, Function body) {
  Value value;
  value.kind_ = Kind::kFunction;
  value.function_ = std::make_shared<const Function>(std::move(body));
  value.text_ = std::move(name);
  return value;
}

const Json& Value::data() const {
  if (node_ == nullptr) fail("a {} value is not data", python_type(*this));
  return *node_;
}

const std::string& Value::as_string() const {
  if (kind_ != Kind::kString) fail("expected a string, got {}", type_description(*this));
  return node_->get_ref<const std::string&>();
}

int64_t Value::as_integer() const {
  if (!is_integer()) fail("expected an integer, got {}", type_description(*this));
  return integer_value(*node_);
}

double Value::as_number() const {
  if (!is_number()) fail("expected a number, got {}", type_description(*this));
  return numeric_value(*node_);
}

Namespace& Value::as_namespace() const {
  if (kind_ != Kind::kNamespace) fail("expected a namespace, got {}", type_description(*this));
  return *namespace_;
}

const Function& Value::as_function() const {
  if (kind_ != Kind::kFunction) fail("{} is not callable", type_description(*this));
  return *function_;
}

size_t Value::size() const { return (is_list() || is_dict()) ? node_->size() : 0; }

Value Value::item(size_t index) const { return view(document_, (*node_)[index]); }

Value Value::member(const std::string& key) const {
  if (is_dict()) {
    const auto found = node_->find(key);
    if (found != node_->end()) return view(document_, *found);
  }
  return undefined(fmt::format("'{}' has no attribute '{}'", type_description(*this), key));
}

bool Value::has_member(const std::string& key) const { return is_dict() && node_->contains(key); }

std::vector<std::string> Value::keys() const {
  std::vector<std::string> out;
  if (is_dict())
    for (auto it = node_->begin(); it != node_->end(); ++it) out.push_back(it.key());
  return out;
}

Json Value::to_json() const {
  switch (kind_) {
    case Kind::kUndefined:
      return nullptr;
    case Kind::kNamespace:
      fail("a namespace cannot be stored in a list or dict, nor serialised");
    case Kind::kFunction:
      fail("function '{}' cannot be stored in a list or dict, nor serialised", text_);
    default:
      return *node_;
  }
}

Value Namespace::get(const std::string& name) const {
  for (const auto& [key, value] : attributes)
    if (key == name) return value;
  return Value::undefined(fmt::format("'namespace object' has no attribute '{}'", name));
}

void Namespace::set(const std::string& name, Value value) {
  for (auto& [key, existing] : attributes) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  attributes.emplace_back(name, std::move(value));
}

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return value.data().get<bool>();
    case Value::Kind::kInt:
      return value.as_integer() != 0;
    case Value::Kind::kFloat:
      return value.as_number() != 0.0;
    case Value::Kind::kString:
      return !value.as_string().empty();
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return value.size() != 0;
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction:
      return true;
  }
  return true;
}

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return value.as_string();
    default:
      return to_repr(value);
  }
}

std::string to_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNamespace:
      return namespace_repr(value.as_namespace());
    case Value::Kind::kFunction:
      return "<function " + value.function_name() + ">";
    default:
      return json_repr(value.data());
  }
}

std::string type_description(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kNamespace:
      return "namespace object";
    default:
      return std::string(python_type(value)) + " object";
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.kind() == Value::Kind::kNamespace || b.kind() == Value::Kind::kNamespace)
    return a.kind() == b.kind() && &a.as_namespace() == &b.as_namespace();
  if (a.kind() == Value::Kind::kFunction || b.kind() == Value::Kind::kFunction)
    return a.kind() == b.kind() && &a.as_function() == &b.as_function();
  return json_equal(a.data(), b.data());
}

int compare(const Value& a, const Value& b) {
  for (const Value* operand : {&a, &b})
    if (operand->is_undefined() && !operand->undefined_reason().empty()) fail("{}", operand->undefined_reason());
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      const double x = a.as_number(), y = b.as_number();
      return x < y ? -1 : (y < x ? 1 : 0);
    }
    const int64_t x = a.as_integer(), y = b.as_integer();
    return x < y ? -1 : (y < x ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int order = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return order < 0 ? -1 : (order > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      if (!equal(a.item(i), b.item(i))) return compare(a.item(i), b.item(i));
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  }
  fail("'<' not supported between instances of '{}' and '{}'", python_type(a), python_type(b));
}

namespace {

[[noreturn]] void fail_operands(const std::string& op, const Value& a, const Value& b) {
  for (const Value* operand : {&a, &b})
    if (operand->is_undefined() && !operand->undefined_reason().empty()) fail("{}", operand->undefined_reason());
  fail("unsupported operand type(s) for {}: '{}' and '{}'", op, python_type(a), python_type(b));
}

[[noreturn]] void fail_overflow() { fail("integer overflow (moetune's template integers are 64-bit)"); }

Value integer_arithmetic(const std::string& op, int64_t x, int64_t y) {
  int64_t result = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &result)) fail_overflow();
    return Value::integer(result);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(x, y, &result)) fail_overflow();
    return Value::integer(result);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(x, y, &result)) fail_overflow();
    return Value::integer(result);
  }
  if (op == "/") {
    if (y == 0) fail("division by zero");
    return Value::number(double(x) / double(y));
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail("integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) {
      if (op == "//") fail_overflow();
      return Value::integer(0);
    }
    int64_t quotient = x / y;
    int64_t remainder = x % y;
    if (remainder != 0 && ((remainder < 0) != (y < 0))) {  // Python rounds the quotient toward minus infinity
      quotient -= 1;
      remainder += y;
    }
    return Value::integer(op == "//" ? quotient : remainder);
  }
  // "**": a negative exponent gives a float, as in Python.
  if (y < 0) return Value::number(std::pow(double(x), double(y)));
  // By squaring: 1 ** 10**18 takes 60 steps, not 10**18. Once base * base overflows with bits of y left, the
  // result would overflow too (|x| >= 2 there: 0 and ±1 never overflow).
  result = 1;
  for (int64_t base = x, exponent = y; exponent > 0; exponent >>= 1) {
    if ((exponent & 1) && __builtin_mul_overflow(result, base, &result)) fail_overflow();
    if (exponent > 1 && __builtin_mul_overflow(base, base, &base)) fail_overflow();
  }
  return Value::integer(result);
}

// CPython's float_divmod: the remainder takes the divisor's sign.
std::pair<double, double> float_divmod(double x, double y) {
  if (y == 0.0) fail("float division by zero");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floor_div = 0.0;
  if (div != 0.0) {
    floor_div = std::floor(div);
    if (div - floor_div > 0.5) floor_div += 1.0;
  } else {
    floor_div = std::copysign(0.0, x / y);
  }
  return {floor_div, mod};
}

Value float_arithmetic(const std::string& op, double x, double y) {
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0.0) fail("float division by zero");
    return Value::number(x / y);
  }
  if (op == "//") return Value::number(float_divmod(x, y).first);
  if (op == "%") return Value::number(float_divmod(x, y).second);
  if (x == 0.0 && y < 0) fail("0.0 cannot be raised to a negative power");
  return Value::number(std::pow(x, y));
}

// The most characters or items a repetition may make: `'' * 10**18` is instant, `'ab' * 10**18` is refused.
constexpr int64_t kMaxRepeatedSize = int64_t(1) << 24;

Value repeat(const Value& sequence, int64_t times) {
  const int64_t length = int64_t(sequence.is_string() ? sequence.as_string().size() : sequence.size());
  if (length == 0 || times <= 0) return sequence.is_string() ? Value::string("") : Value::json(Json::array());
  if (times > kMaxRepeatedSize / length)
    fail("repeating {} items {} times makes more than {} (moetune's limit)", length, times, kMaxRepeatedSize);
  if (sequence.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value::string(out);
  }
  Json items = Json::array();
  for (int64_t i = 0; i < times; ++i)
    for (const Json& item : sequence.data()) items.push_back(item);
  return Value::json(std::move(items));
}

}  // namespace

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat)
      return float_arithmetic(op, a.as_number(), b.as_number());
    return integer_arithmetic(op, a.as_integer(), b.as_integer());
  }
  if (op == "+" && a.is_string() && b.is_string()) return Value::string(a.as_string() + b.as_string());
  if (op == "+" && a.is_list() && b.is_list()) {
    Json items = a.data();
    for (const Json& item : b.data()) items.push_back(item);
    return Value::json(std::move(items));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && b.is_integer()) return repeat(a, b.as_integer());
  if (op == "*" && a.is_integer() && (b.is_string() || b.is_list())) return repeat(b, a.as_integer());
  if (op == "%" && a.is_string()) fail("string formatting with % is not supported");
  fail_operands(op, a, b);
}

Value negate(const Value& operand) {
  if (operand.kind() == Value::Kind::kFloat) return Value::number(-operand.as_number());
  if (operand.is_integer()) return integer_arithmetic("-", 0, operand.as_integer());
  if (operand.is_undefined() && !operand.undefined_reason().empty()) fail("{}", operand.undefined_reason());
  fail("bad operand type for unary -: '{}'", python_type(operand));
}

Value unary_plus(const Value& operand) {
  if (operand.kind() == Value::Kind::kFloat) return operand;
  if (operand.is_integer()) return Value::integer(operand.as_integer());
  if (operand.is_undefined() && !operand.undefined_reason().empty()) fail("{}", operand.undefined_reason());
  fail("bad operand type for unary +: '{}'", python_type(operand));
}

std::vector<Value> iterate(const Value& value) {
  std::vector<Value> items;
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return items;
    case Value::Kind::kList:
      for (size_t i = 0; i < value.size(); ++i) items.push_back(value.item(i));
      return items;
    case Value::Kind::kDict:
      for (std::string& key : value.keys()) items.push_back(Value::string(std::move(key)));
      return items;
    case Value::Kind::kString: {
      const std::string& text = value.as_string();
      if (py::is_ascii(text)) {
        for (const char c : text) items.push_back(Value::string(std::string(1, c)));
      } else {
        for (const char32_t c : py::decode(text)) items.push_back(Value::string(py::encode(std::u32string(1, c))));
      }
      return items;
    }
    default:
      fail("'{}' object is not iterable", python_type(value));
  }
}

size_t length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return py::length(value.as_string());
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return value.size();
    default:
      fail("object of type '{}' has no len()", python_type(value));
  }
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!needle.is_string()) fail("'in <string>' requires string as left operand, not {}", python_type(needle));
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (size_t i = 0; i < haystack.size(); ++i)
        if (equal(haystack.item(i), needle)) return true;
      return false;
    case Value::Kind::kDict:
      return needle.is_string() && haystack.has_member(needle.as_string());
    default:
      fail("argument of type '{}' is not iterable", python_type(haystack));
  }
}

}  // namespace moetune::text::jinja
