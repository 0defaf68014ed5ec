// The values a chat template computes with, and the Python semantics Jinja gives them: truthiness, str() and
// repr(), ==, ordering, iteration, len(). Data (None, bools, numbers, strings, lists, dicts) is JSON: an
// ordered_json, so that dict keys keep their insertion order as in Python. A Value that is part of a larger
// document (messages[3].content) shares that document instead of copying it.
//
// Beyond data there are Jinja's Undefined (what a missing variable or key gives), namespace() objects (the one
// mutable thing a template can make) and functions (macros, bound methods, globals such as range).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace moetune::text::jinja {

using Json = nlohmann::ordered_json;

class Value;

// A call's arguments as written: f(1, 2, key=3).
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using Function = std::function<Value(const Arguments&)>;
struct Namespace;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // Undefined
  // An Undefined that remembers why, for the error when it is used where Jinja raises ("'foo' is undefined").
  static Value undefined(std::string reason);
  static Value none();
  static Value boolean(bool value);
  static Value integer(int64_t value);
  static Value number(double value);
  static Value string(std::string value);
  static Value json(Json value);
  // A part of a shared document: `node` must live inside `*document`.
  static Value view(std::shared_ptr<const Json> document, const Json& node);
  // A list or dict built from values (an Undefined item becomes null, as Jinja's tojson would refuse it anyway).
  static Value list(const std::vector<Value>& items);
  static Value make_namespace(std::shared_ptr<Namespace> attributes);
  static Value function(std::string name, Function body);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_integer() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }  // Python's bool is an int

  const Json& data() const;  // None .. Dict
  const std::string& as_string() const;
  int64_t as_integer() const;  // Bool or Int
  double as_number() const;    // Bool, Int or Float
  Namespace& as_namespace() const;
  const Function& as_function() const;
  const std::string& undefined_reason() const { return text_; }
  const std::string& function_name() const { return text_; }

  size_t size() const;                         // items of a list, keys of a dict
  Value item(size_t index) const;              // list element (shared, not copied)
  Value member(const std::string& key) const;  // dict value, or an Undefined naming the key
  bool has_member(const std::string& key) const;
  std::vector<std::string> keys() const;  // dict keys in order

  // The value as JSON, to go into a list or dict or through tojson. A namespace or function is an Error.
  Json to_json() const;

 private:
  Kind kind_ = Kind::kUndefined;
  std::shared_ptr<const Json> document_;
  const Json* node_ = nullptr;
  std::shared_ptr<Namespace> namespace_;
  std::shared_ptr<const Function> function_;
  std::string text_;  // an Undefined's reason, a function's name
};

struct Namespace {
  std::vector<std::pair<std::string, Value>> attributes;  // in the order set, as printed

  Value get(const std::string& name) const;  // Undefined when unset
  void set(const std::string& name, Value value);
};

// Python truthiness: None, False, 0, 0.0, "", [], {} and Undefined are false.
bool truthy(const Value& value);
// str(value) as Jinja prints it: "None", "True", "1.0", "['a', 1]"; an Undefined prints nothing.
std::string to_str(const Value& value);
std::string to_repr(const Value& value);
// Jinja's name for a value's type in messages: "str object", "dict object", "None".
std::string type_description(const Value& value);

// Python ==: 1 == 1.0 == True, lists and dicts by content (dicts ignoring order); an Undefined equals only another.
bool equal(const Value& a, const Value& b);
// Python's <, as -1 / 0 / 1, for numbers, strings and lists; anything else is an Error, as Python's TypeError is.
int compare(const Value& a, const Value& b);

// Python's + - * / // % ** on numbers (bool counting as int), + on two strings or two lists, * repeating a string or
// list. Anything else, an Undefined included, is an Error as in Jinja; `op` is the operator's spelling.
Value arithmetic(const std::string& op, const Value& a, const Value& b);
// Unary - and +.
Value negate(const Value& operand);
Value unary_plus(const Value& operand);

// What `for x in value` visits: list items, dict keys, a string's characters, nothing for Undefined. Anything else
// is an Error ("'int' object is not iterable").
std::vector<Value> iterate(const Value& value);
// len(value): characters, items or keys (0 for Undefined); an Error for numbers and None.
size_t length(const Value& value);
// `needle in haystack`: a substring, a list item, a dict key.
bool contains(const Value& haystack, const Value& needle);

}  // namespace moetune::text::jinja
