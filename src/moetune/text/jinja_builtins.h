// What a template can call besides its own macros: Jinja's filters (`x | trim`) and tests (`x is string`), the
// Python methods templates call on strings and dicts (`content.split('</think>')`, `message.get('x')`), and the
// global functions range(), namespace() and dict(). The semantics are Jinja 3.1's and Python's, with transformers'
// own `tojson` (json.dumps with ensure_ascii=False, indent, separators, sort_keys).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moetune/text/jinja_value.h"

namespace moetune::text::jinja {

bool is_supported_filter(std::string_view name);
bool is_supported_test(std::string_view name);

// Errors are plain Errors ("join(): ..."); the renderer puts the template position in front.
Value apply_filter(const std::string& name, const Value& operand, const Arguments& arguments);
bool apply_test(const std::string& name, const Value& operand, const Arguments& arguments);

// `object.name` when `object` is a string or dict and `name` one of its Python methods: the method bound to the
// object, or an Error when it is a method this renderer does not implement. nullopt when there is no such method
// (for a dict, `name` is then looked up as a key).
std::optional<Value> bound_method(const Value& object, const std::string& name);

// The functions every template sees: range, namespace, dict (and, as clear errors, Jinja's lipsum/cycler/joiner).
std::vector<std::pair<std::string, Value>> global_functions();

// A call's arguments bound to a Python-style signature, with the messages Python gives for a bad call.
class BoundArguments {
 public:
  // `parameters` in positional order; the first `required` of them must be given.
  BoundArguments(std::string_view function, const Arguments& arguments, std::vector<std::string_view> parameters,
                 size_t required = 0);
  bool has(size_t index) const { return values_[index].has_value(); }
  const Value& get(size_t index) const;  // a required or given argument
  Value get_or(size_t index, Value fallback) const { return has(index) ? *values_[index] : std::move(fallback); }

 private:
  std::string function_;
  std::vector<std::string_view> parameters_;
  std::vector<std::optional<Value>> values_;
};

// Jinja's environment.getattr / getitem: `object.name` tries a method before a dict key, `object[key]` the key
// before a method. A missing one is an Undefined; looking anything up on an Undefined is an Error, as in Jinja.
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);

// Jinja's make_attrgetter: "a.b.0" looked up step by step (a digit step is a list index); Undefined if missing.
Value get_attribute_path(const Value& item, const std::string& path);

}  // namespace moetune::text::jinja
