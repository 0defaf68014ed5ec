// Attribute and item lookup as Jinja's environment does it, the Python str and dict methods templates call, and the
// global functions.
#include <algorithm>

#include "moetune/core/error.h"
#include "moetune/text/jinja_builtins.h"
#include "moetune/text/python_str.h"

namespace moetune::text::jinja {

namespace {

using Method = Value (*)(const Value& self, const Arguments& arguments);

std::optional<std::string> optional_string(const BoundArguments& args, size_t index) {
  if (!args.has(index) || args.get(index).is_none()) return std::nullopt;
  return args.get(index).as_string();
}

Value string_list(const std::vector<std::string>& parts) {
  Json array = Json::array();
  for (const std::string& part : parts) array.push_back(part);
  return Value::json(std::move(array));
}

// startswith / endswith take one prefix or a tuple (a list here) of them.
bool affix_matches(const Value& self, const Arguments& arguments, const char* name, bool at_start) {
  const BoundArguments args(name, arguments, {"affix"}, 1);
  const std::string& text = self.as_string();
  const auto matches = [&](const std::string& affix) {
    return at_start ? text.compare(0, affix.size(), affix) == 0
                    : text.size() >= affix.size() && text.compare(text.size() - affix.size(), affix.size(), affix) == 0;
  };
  const Value& affix = args.get(0);
  if (affix.is_list()) {
    for (size_t i = 0; i < affix.size(); ++i)
      if (matches(affix.item(i).as_string())) return true;
    return false;
  }
  return matches(affix.as_string());
}

Value str_startswith(const Value& self, const Arguments& a) {
  return Value::boolean(affix_matches(self, a, "str.startswith()", true));
}
Value str_endswith(const Value& self, const Arguments& a) {
  return Value::boolean(affix_matches(self, a, "str.endswith()", false));
}

Value strip_method(const Value& self, const Arguments& a, const char* name, bool left, bool right) {
  const BoundArguments args(name, a, {"chars"});
  return Value::string(py::strip(self.as_string(), optional_string(args, 0), left, right));
}
Value str_strip(const Value& self, const Arguments& a) { return strip_method(self, a, "str.strip()", true, true); }
Value str_lstrip(const Value& self, const Arguments& a) { return strip_method(self, a, "str.lstrip()", true, false); }
Value str_rstrip(const Value& self, const Arguments& a) { return strip_method(self, a, "str.rstrip()", false, true); }

Value str_split(const Value& self, const Arguments& a) {
  const BoundArguments args("str.split()", a, {"sep", "maxsplit"});
  return string_list(
      py::split(self.as_string(), optional_string(args, 0), args.get_or(1, Value::integer(-1)).as_integer()));
}
Value str_rsplit(const Value& self, const Arguments& a) {
  const BoundArguments args("str.rsplit()", a, {"sep", "maxsplit"});
  return string_list(
      py::rsplit(self.as_string(), optional_string(args, 0), args.get_or(1, Value::integer(-1)).as_integer()));
}
Value str_splitlines(const Value& self, const Arguments& a) {
  const BoundArguments args("str.splitlines()", a, {"keepends"});
  return string_list(py::splitlines(self.as_string(), args.has(0) && truthy(args.get(0))));
}

Value str_replace(const Value& self, const Arguments& a) {
  const BoundArguments args("str.replace()", a, {"old", "new", "count"}, 2);
  return Value::string(py::replace(self.as_string(), args.get(0).as_string(), args.get(1).as_string(),
                                   args.get_or(2, Value::integer(-1)).as_integer()));
}

Value str_upper(const Value& self, const Arguments& a) {
  BoundArguments("str.upper()", a, {});
  return Value::string(py::upper(self.as_string()));
}
Value str_lower(const Value& self, const Arguments& a) {
  BoundArguments("str.lower()", a, {});
  return Value::string(py::lower(self.as_string()));
}
Value str_title(const Value& self, const Arguments& a) {
  BoundArguments("str.title()", a, {});
  return Value::string(py::title(self.as_string()));
}
Value str_capitalize(const Value& self, const Arguments& a) {
  BoundArguments("str.capitalize()", a, {});
  return Value::string(py::capitalize(self.as_string()));
}

Value str_find(const Value& self, const Arguments& a) {
  const BoundArguments args("str.find()", a, {"sub"}, 1);
  return Value::integer(py::find(self.as_string(), args.get(0).as_string()));
}
Value str_rfind(const Value& self, const Arguments& a) {
  const BoundArguments args("str.rfind()", a, {"sub"}, 1);
  return Value::integer(py::rfind(self.as_string(), args.get(0).as_string()));
}
Value str_index(const Value& self, const Arguments& a) {
  const BoundArguments args("str.index()", a, {"sub"}, 1);
  const int64_t found = py::find(self.as_string(), args.get(0).as_string());
  if (found < 0) fail("substring not found");
  return Value::integer(found);
}
Value str_count(const Value& self, const Arguments& a) {
  const BoundArguments args("str.count()", a, {"sub"}, 1);
  return Value::integer(py::count(self.as_string(), args.get(0).as_string()));
}

Value str_join(const Value& self, const Arguments& a) {
  const BoundArguments args("str.join()", a, {"iterable"}, 1);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(args.get(0))) {
    if (!first) out += self.as_string();
    out += item.as_string();
    first = false;
  }
  return Value::string(out);
}

Value str_isspace(const Value& self, const Arguments& a) {
  BoundArguments("str.isspace()", a, {});
  const std::u32string text = py::decode(self.as_string());
  return Value::boolean(!text.empty() && std::all_of(text.begin(), text.end(), py::is_space));
}
Value str_islower(const Value& self, const Arguments& a) {
  BoundArguments("str.islower()", a, {});
  return Value::boolean(py::is_lower(self.as_string()));
}
Value str_isupper(const Value& self, const Arguments& a) {
  BoundArguments("str.isupper()", a, {});
  return Value::boolean(py::is_upper(self.as_string()));
}

Value str_removeprefix(const Value& self, const Arguments& a) {
  const BoundArguments args("str.removeprefix()", a, {"prefix"}, 1);
  const std::string& text = self.as_string();
  const std::string& prefix = args.get(0).as_string();
  return Value::string(text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : text);
}
Value str_removesuffix(const Value& self, const Arguments& a) {
  const BoundArguments args("str.removesuffix()", a, {"suffix"}, 1);
  const std::string& text = self.as_string();
  const std::string& suffix = args.get(0).as_string();
  const bool ends = !suffix.empty() && text.size() >= suffix.size() &&
                    text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
  return Value::string(ends ? text.substr(0, text.size() - suffix.size()) : text);
}

Value dict_get(const Value& self, const Arguments& a) {
  const BoundArguments args("dict.get()", a, {"key", "default"}, 1);
  const Value& key = args.get(0);
  if (key.is_string() && self.has_member(key.as_string())) return self.member(key.as_string());
  return args.get_or(1, Value::none());
}
Value dict_items(const Value& self, const Arguments& a) {
  BoundArguments("dict.items()", a, {});
  return apply_filter("items", self, {});
}
Value dict_keys(const Value& self, const Arguments& a) {
  BoundArguments("dict.keys()", a, {});
  return Value::list(iterate(self));
}
Value dict_values(const Value& self, const Arguments& a) {
  BoundArguments("dict.values()", a, {});
  std::vector<Value> values;
  for (const std::string& key : self.keys()) values.push_back(self.member(key));
  return Value::list(values);
}

Value list_count(const Value& self, const Arguments& a) {
  const BoundArguments args("list.count()", a, {"value"}, 1);
  int64_t n = 0;
  for (size_t i = 0; i < self.size(); ++i) n += equal(self.item(i), args.get(0)) ? 1 : 0;
  return Value::integer(n);
}
Value list_index(const Value& self, const Arguments& a) {
  const BoundArguments args("list.index()", a, {"value"}, 1);
  for (size_t i = 0; i < self.size(); ++i)
    if (equal(self.item(i), args.get(0))) return Value::integer(int64_t(i));
  fail("{} is not in list", to_repr(args.get(0)));
}

struct MethodTable {
  std::vector<std::pair<std::string_view, Method>> implemented;
  std::vector<std::string_view> not_implemented;  // real Python methods, so that a call says "not supported"
};

const MethodTable& string_methods() {
  static const MethodTable table = {
      {{"startswith", str_startswith},
       {"endswith", str_endswith},
       {"strip", str_strip},
       {"lstrip", str_lstrip},
       {"rstrip", str_rstrip},
       {"split", str_split},
       {"rsplit", str_rsplit},
       {"splitlines", str_splitlines},
       {"replace", str_replace},
       {"upper", str_upper},
       {"lower", str_lower},
       {"title", str_title},
       {"capitalize", str_capitalize},
       {"find", str_find},
       {"rfind", str_rfind},
       {"index", str_index},
       {"count", str_count},
       {"join", str_join},
       {"isspace", str_isspace},
       {"islower", str_islower},
       {"isupper", str_isupper},
       {"removeprefix", str_removeprefix},
       {"removesuffix", str_removesuffix}},
      {"format",     "format_map",   "center",   "ljust",       "rjust",   "zfill",   "encode",    "partition",
       "rpartition", "casefold",     "swapcase", "expandtabs",  "isdigit", "isalpha", "isalnum",   "isnumeric",
       "isdecimal",  "isidentifier", "istitle",  "isprintable", "isascii", "rindex",  "translate", "maketrans"}};
  return table;
}

const MethodTable& dict_methods() {
  static const MethodTable table = {
      {{"get", dict_get}, {"items", dict_items}, {"keys", dict_keys}, {"values", dict_values}},
      {"copy", "pop", "popitem", "setdefault", "update", "clear", "fromkeys"}};
  return table;
}

const MethodTable& list_methods() {
  static const MethodTable table = {
      {{"count", list_count}, {"index", list_index}},
      {"append", "extend", "insert", "remove", "pop", "clear", "copy", "sort", "reverse"}};
  return table;
}

Value undefined_error(const Value& undefined) {
  fail("{}", undefined.undefined_reason().empty() ? "the value is undefined" : undefined.undefined_reason());
}

Value range(const Arguments& arguments) {
  if (!arguments.keyword.empty() || arguments.positional.empty() || arguments.positional.size() > 3)
    fail("range() takes 1 to 3 integer arguments");
  int64_t start = 0, stop = 0, step = 1;
  if (arguments.positional.size() == 1) {
    stop = arguments.positional[0].as_integer();
  } else {
    start = arguments.positional[0].as_integer();
    stop = arguments.positional[1].as_integer();
    if (arguments.positional.size() == 3) step = arguments.positional[2].as_integer();
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  Json items = Json::array();
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    // Jinja's sandbox refuses ranges this long too.
    if (items.size() >= 100000) fail("range too big (the sandbox allows 100000 items)");
    items.push_back(i);
  }
  return Value::json(std::move(items));
}

Value make_namespace(const Arguments& arguments) {
  auto ns = std::make_shared<Namespace>();
  if (arguments.positional.size() > 1) fail("namespace() takes at most one positional argument (a dict)");
  if (arguments.positional.size() == 1)
    for (const std::string& key : arguments.positional[0].keys()) ns->set(key, arguments.positional[0].member(key));
  for (const auto& [name, value] : arguments.keyword) ns->set(name, value);
  return Value::make_namespace(std::move(ns));
}

Value make_dict(const Arguments& arguments) {
  Json object = Json::object();
  if (arguments.positional.size() > 1) fail("dict() takes at most one positional argument");
  if (arguments.positional.size() == 1) object = arguments.positional[0].to_json();
  for (const auto& [name, value] : arguments.keyword) object[name] = value.to_json();
  return Value::json(std::move(object));
}

}  // namespace

std::optional<Value> bound_method(const Value& object, const std::string& name) {
  const MethodTable* table = object.is_string() ? &string_methods()
                             : object.is_dict() ? &dict_methods()
                             : object.is_list() ? &list_methods()
                                                : nullptr;
  if (table == nullptr) return std::nullopt;
  for (const auto& [method_name, method] : table->implemented) {
    if (method_name != name) continue;
    const Method body = method;
    return Value::function(std::string(method_name),
                           [object, body](const Arguments& arguments) { return body(object, arguments); });
  }
  if (std::find(table->not_implemented.begin(), table->not_implemented.end(), name) != table->not_implemented.end())
    fail("{} method '{}' is not supported", object.is_string() ? "str" : object.is_dict() ? "dict" : "list", name);
  return std::nullopt;
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) return undefined_error(object);
  if (object.kind() == Value::Kind::kNamespace) return object.as_namespace().get(name);
  if (std::optional<Value> method = bound_method(object, name)) return *method;
  return object.member(name);  // an Undefined naming the attribute for anything but a dict holding the key
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) return undefined_error(object);
  if ((object.is_list() || object.is_string()) && key.is_integer()) {
    const int64_t size = object.is_list() ? int64_t(object.size()) : int64_t(length(object));
    int64_t index = key.as_integer();
    if (index < 0) index += size;
    if (index < 0 || index >= size)
      return Value::undefined(fmt::format("'{}' has no element {}", type_description(object), key.as_integer()));
    if (object.is_list()) return object.item(size_t(index));
    const std::string& text = object.as_string();
    if (py::is_ascii(text)) return Value::string(text.substr(size_t(index), 1));
    return Value::string(py::encode(py::decode(text).substr(size_t(index), 1)));
  }
  if (!key.is_string())
    return Value::undefined(fmt::format("'{}' has no element {}", type_description(object), to_repr(key)));
  if (object.is_dict() && object.has_member(key.as_string())) return object.member(key.as_string());
  return get_attribute(object, key.as_string());
}

std::vector<std::pair<std::string, Value>> global_functions() {
  std::vector<std::pair<std::string, Value>> functions = {
      {"range", Value::function("range", range)},
      {"namespace", Value::function("namespace", make_namespace)},
      {"dict", Value::function("dict", make_dict)},
  };
  for (const char* name : {"lipsum", "cycler", "joiner"})
    functions.emplace_back(name, Value::function(name, [name = std::string(name)](const Arguments&) -> Value {
                             fail("function '{}' is not supported", name);
                           }));
  return functions;
}

}  // namespace moetune::text::jinja
