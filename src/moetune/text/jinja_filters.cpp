// Jinja's filters and tests, as jinja2/filters.py and jinja2/tests.py define them (3.1), plus transformers' tojson.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "moetune/core/error.h"
#include "moetune/text/jinja_builtins.h"
#include "moetune/text/python_json.h"
#include "moetune/text/python_str.h"

namespace moetune::text::jinja {

BoundArguments::BoundArguments(std::string_view function, const Arguments& arguments,
                               std::vector<std::string_view> parameters, size_t required)
    : function_(function), parameters_(std::move(parameters)), values_(parameters_.size()) {
  if (arguments.positional.size() > parameters_.size())
    fail("{}: takes at most {} argument(s), {} given", function_, parameters_.size(), arguments.positional.size());
  for (size_t i = 0; i < arguments.positional.size(); ++i) values_[i] = arguments.positional[i];
  for (const auto& [name, value] : arguments.keyword) {
    const auto found = std::find(parameters_.begin(), parameters_.end(), name);
    if (found == parameters_.end()) fail("{}: unexpected keyword argument '{}'", function_, name);
    auto& slot = values_[size_t(found - parameters_.begin())];
    if (slot) fail("{}: got multiple values for argument '{}'", function_, name);
    slot = value;
  }
  for (size_t i = 0; i < required; ++i)
    if (!values_[i]) fail("{}: missing required argument '{}'", function_, parameters_[i]);
}

const Value& BoundArguments::get(size_t index) const {
  if (!values_[index]) fail("{}: missing argument '{}'", function_, parameters_[index]);
  return *values_[index];
}

Value get_attribute_path(const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool is_index =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    current = get_item(current, is_index ? Value::integer(std::atoll(part.c_str())) : Value::string(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

namespace {

using FilterFunction = Value (*)(const Value& operand, const Arguments& arguments);

std::optional<std::string> optional_string(const BoundArguments& args, size_t index) {
  if (!args.has(index) || args.get(index).is_none()) return std::nullopt;
  return to_str(args.get(index));
}

// Python's int(text): surrounding whitespace allowed, digits with '_' between them, an optional sign.
std::optional<int64_t> parse_int(const std::string& text) {
  std::string digits = py::strip(text);
  if (digits.find("__") != std::string::npos || (!digits.empty() && (digits.back() == '_' || digits[0] == '_')))
    return std::nullopt;
  digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(digits.c_str(), &end, 10);
  if (errno != 0 || end != digits.c_str() + digits.size() || !std::isdigit(uint8_t(digits.back()))) return std::nullopt;
  return int64_t(value);
}

// Python's float(text): surrounding whitespace, a sign, digits with '_' between them, a fraction and an exponent,
// or inf / infinity / nan in any case. strtod alone would also take hex floats and "nan(...)".
std::optional<double> parse_float(const std::string& text) {
  std::string s = py::strip(text);
  if (s.find("__") != std::string::npos) return std::nullopt;
  std::string lowered = py::lower(s);
  const size_t sign = (!lowered.empty() && (lowered[0] == '+' || lowered[0] == '-')) ? 1 : 0;
  const std::string body = lowered.substr(sign);
  if (body == "inf" || body == "infinity" || body == "nan") return std::strtod(s.c_str(), nullptr);
  bool digits = false, exponent_digits = true;
  for (size_t i = 0, part = 0; i < body.size(); ++i) {  // part: 0 integer, 1 fraction, 2 exponent
    const char c = body[i];
    const bool digit = c >= '0' && c <= '9';
    const bool joined = c == '_' && i > 0 && std::isdigit(uint8_t(body[i - 1])) && i + 1 < body.size() &&
                        std::isdigit(uint8_t(body[i + 1]));
    if (digit) {
      (part == 2 ? exponent_digits : digits) = true;
    } else if (c == '.' && part == 0) {
      part = 1;
    } else if (c == 'e' && part < 2 && digits) {
      part = 2;
      exponent_digits = false;
      if (i + 1 < body.size() && (body[i + 1] == '+' || body[i + 1] == '-')) ++i;
    } else if (!joined) {
      return std::nullopt;
    }
  }
  if (!digits || !exponent_digits) return std::nullopt;
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  return std::strtod(s.c_str(), nullptr);
}

// The key a sort, unique, min or max filter compares: the item or its attribute, lowered unless case-sensitive.
Value sort_key(const Value& item, const BoundArguments& args, size_t case_sensitive_index, size_t attribute_index) {
  Value key = args.has(attribute_index) && !args.get(attribute_index).is_none()
                  ? get_attribute_path(item, to_str(args.get(attribute_index)))
                  : item;
  const bool case_sensitive = args.has(case_sensitive_index) && truthy(args.get(case_sensitive_index));
  if (!case_sensitive && key.is_string()) return Value::string(py::lower(key.as_string()));
  return key;
}

Value filter_trim(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("trim filter", arguments, {"chars"});
  return Value::string(py::strip(to_str(operand), optional_string(args, 0)));
}

Value filter_length(const Value& operand, const Arguments& arguments) {
  BoundArguments("length filter", arguments, {});
  return Value::integer(int64_t(length(operand)));
}

Value filter_upper(const Value& operand, const Arguments&) { return Value::string(py::upper(to_str(operand))); }
Value filter_lower(const Value& operand, const Arguments&) { return Value::string(py::lower(to_str(operand))); }
Value filter_capitalize(const Value& operand, const Arguments&) {
  return Value::string(py::capitalize(to_str(operand)));
}

// Jinja's title filter, unlike str.title(), starts a word only after '-', whitespace or an opening bracket.
Value filter_title(const Value& operand, const Arguments&) {
  std::string out;
  bool word_start = true;
  for (const char32_t c : py::decode(to_str(operand))) {
    const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py::is_space(c);
    const std::string one = py::encode(std::u32string(1, c));
    out += separator ? one : word_start ? py::upper(one) : py::lower(one);
    word_start = separator;
  }
  return Value::string(out);
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value filter_tojson(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("tojson filter", arguments, {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (operand.is_undefined()) fail("Object of type Undefined is not JSON serializable");
  py::JsonDumpOptions options;
  options.ensure_ascii = args.has(0) && truthy(args.get(0));
  if (args.has(1) && !args.get(1).is_none()) {
    const Value& indent = args.get(1);
    options.indent =
        indent.is_string() ? indent.as_string() : std::string(size_t(std::max<int64_t>(0, indent.as_integer())), ' ');
  }
  if (args.has(2) && !args.get(2).is_none()) {
    const Value& separators = args.get(2);
    if (!separators.is_list() || separators.size() != 2) fail("tojson: separators must be an (item, key) pair");
    options.item_separator = separators.item(0).as_string();
    options.key_separator = separators.item(1).as_string();
  }
  options.sort_keys = args.has(3) && truthy(args.get(3));
  return Value::string(py::json_dumps(operand.to_json(), options));
}

Value filter_string(const Value& operand, const Arguments&) { return Value::string(to_str(operand)); }

// Jinja's int filter: int(x), else int(float(x)) (so "42.23" gives 42), else the default.
Value filter_int(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("int filter", arguments, {"default", "base"});
  const Value fallback = args.get_or(0, Value::integer(0));
  if (operand.is_undefined()) fail("{}", operand.undefined_reason());  // int(Undefined) raises in Jinja
  if (args.has(1) && args.get(1).as_integer() != 10) fail("int filter: only base 10 is supported");
  if (operand.is_integer()) return Value::integer(operand.as_integer());
  if (operand.kind() == Value::Kind::kFloat) {
    const double value = operand.as_number();
    return std::isfinite(value) ? Value::integer(int64_t(value)) : fallback;
  }
  if (operand.is_string()) {
    if (const auto value = parse_int(operand.as_string())) return Value::integer(*value);
    if (const auto value = parse_float(operand.as_string()); value && std::isfinite(*value))
      return Value::integer(int64_t(*value));
  }
  return fallback;
}

Value filter_float(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("float filter", arguments, {"default"});
  if (operand.is_undefined()) fail("{}", operand.undefined_reason());
  if (operand.is_number()) return Value::number(operand.as_number());
  if (operand.is_string())
    if (const auto value = parse_float(operand.as_string())) return Value::number(*value);
  return args.get_or(0, Value::number(0.0));
}

Value filter_abs(const Value& operand, const Arguments&) {
  if (operand.kind() == Value::Kind::kFloat) return Value::number(std::fabs(operand.as_number()));
  return Value::integer(std::abs(operand.as_integer()));
}

Value filter_join(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("join filter", arguments, {"d", "attribute"});
  const std::string separator = args.has(0) ? to_str(args.get(0)) : "";
  const std::optional<std::string> attribute = optional_string(args, 1);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(operand)) {
    if (!first) out += separator;
    out += to_str(attribute ? get_attribute_path(item, *attribute) : item);
    first = false;
  }
  return Value::string(out);
}

Value filter_first(const Value& operand, const Arguments&) {
  const std::vector<Value> items = iterate(operand);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value filter_last(const Value& operand, const Arguments&) {
  const std::vector<Value> items = iterate(operand);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value filter_default(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("default filter", arguments, {"default_value", "boolean"});
  const bool boolean = args.has(1) && truthy(args.get(1));
  if (operand.is_undefined() || (boolean && !truthy(operand))) return args.get_or(0, Value::string(""));
  return operand;
}

Value filter_items(const Value& operand, const Arguments&) {
  if (operand.is_undefined()) return Value::json(Json::array());
  if (!operand.is_dict()) fail("Can only get item pairs from a mapping.");
  Json pairs = Json::array();
  for (auto it = operand.data().begin(); it != operand.data().end(); ++it)
    pairs.push_back(Json::array({it.key(), it.value()}));
  return Value::json(std::move(pairs));
}

// Jinja's dictsort: the (key, value) pairs sorted by key (or by="value"), strings compared lowered unless
// case_sensitive; equal keys keep their order, as Python's sorted does.
Value filter_dictsort(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("dictsort filter", arguments, {"case_sensitive", "by", "reverse"});
  if (!operand.is_dict()) fail("dictsort filter: expected a mapping, got {}", to_str(operand));
  const bool case_sensitive = args.has(0) && truthy(args.get(0));
  const std::string by = args.has(1) ? to_str(args.get(1)) : "key";
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  const bool reverse = args.has(2) && truthy(args.get(2));
  std::vector<std::pair<Value, Json>> keyed;  // (sort key, [key, value])
  for (auto it = operand.data().begin(); it != operand.data().end(); ++it) {
    Value key = by == "key" ? Value::string(it.key()) : Value::json(it.value());
    if (!case_sensitive && key.is_string()) key = Value::string(py::lower(key.as_string()));
    keyed.emplace_back(std::move(key), Json::array({it.key(), it.value()}));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  Json pairs = Json::array();
  for (auto& [key, pair] : keyed) pairs.push_back(std::move(pair));
  return Value::json(std::move(pairs));
}

Value filter_list(const Value& operand, const Arguments&) { return Value::list(iterate(operand)); }

Value filter_replace(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("replace filter", arguments, {"old", "new", "count"}, 2);
  const int64_t count = args.has(2) && !args.get(2).is_none() ? args.get(2).as_integer() : -1;
  return Value::string(py::replace(to_str(operand), to_str(args.get(0)), to_str(args.get(1)), count));
}

// select / reject / selectattr / rejectattr: keep the items whose (attribute's) test result is `keep`; without a
// test name the test is truthiness.
Value select_or_reject(const Value& operand, const Arguments& arguments, bool keep, bool by_attribute) {
  const std::string name = by_attribute ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  size_t next = 0;
  std::optional<std::string> attribute;
  if (by_attribute) {
    if (arguments.positional.empty()) fail("{} filter: missing the attribute name", name);
    attribute = to_str(arguments.positional[next++]);
  }
  std::optional<std::string> test;
  Arguments test_arguments;
  if (next < arguments.positional.size()) {
    test = to_str(arguments.positional[next++]);
    if (!is_supported_test(*test)) fail("test '{}' is not supported", *test);
    test_arguments.positional.assign(arguments.positional.begin() + std::ptrdiff_t(next), arguments.positional.end());
    test_arguments.keyword = arguments.keyword;
  }
  std::vector<Value> kept;
  if (!truthy(operand)) return Value::list(kept);
  for (const Value& item : iterate(operand)) {
    const Value subject = attribute ? get_attribute_path(item, *attribute) : item;
    const bool result = test ? apply_test(*test, subject, test_arguments) : truthy(subject);
    if (result == keep) kept.push_back(item);
  }
  return Value::list(kept);
}

Value filter_select(const Value& operand, const Arguments& arguments) {
  return select_or_reject(operand, arguments, true, false);
}
Value filter_reject(const Value& operand, const Arguments& arguments) {
  return select_or_reject(operand, arguments, false, false);
}
Value filter_selectattr(const Value& operand, const Arguments& arguments) {
  return select_or_reject(operand, arguments, true, true);
}
Value filter_rejectattr(const Value& operand, const Arguments& arguments) {
  return select_or_reject(operand, arguments, false, true);
}

// map(attribute='a.b', default=x) picks an attribute of each item; map('name', args...) applies a filter to each.
Value filter_map(const Value& operand, const Arguments& arguments) {
  std::vector<Value> mapped;
  if (!truthy(operand)) return Value::list(mapped);  // Jinja maps nothing over a false value (None, 0, "")
  const auto attribute = std::find_if(arguments.keyword.begin(), arguments.keyword.end(),
                                      [](const auto& keyword) { return keyword.first == "attribute"; });
  if (arguments.positional.empty() && attribute != arguments.keyword.end()) {
    const BoundArguments args("map filter", arguments, {"attribute", "default"});
    const std::string path = to_str(args.get(0));
    for (const Value& item : iterate(operand)) {
      Value value = get_attribute_path(item, path);
      mapped.push_back(value.is_undefined() && args.has(1) ? args.get(1) : value);
    }
    return Value::list(mapped);
  }
  if (arguments.positional.empty()) fail("map filter: give a filter name or attribute=...");
  const std::string filter = to_str(arguments.positional[0]);
  if (!is_supported_filter(filter)) fail("filter '{}' is not supported", filter);
  Arguments filter_arguments{{arguments.positional.begin() + 1, arguments.positional.end()}, arguments.keyword};
  for (const Value& item : iterate(operand)) mapped.push_back(apply_filter(filter, item, filter_arguments));
  return Value::list(mapped);
}

Value filter_safe(const Value& operand, const Arguments&) { return Value::string(to_str(operand)); }

Value filter_reverse(const Value& operand, const Arguments&) {
  if (operand.is_string()) {
    std::u32string characters = py::decode(operand.as_string());
    std::reverse(characters.begin(), characters.end());
    return Value::string(py::encode(characters));
  }
  std::vector<Value> items = iterate(operand);
  std::reverse(items.begin(), items.end());
  return Value::list(items);
}

Value filter_unique(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("unique filter", arguments, {"case_sensitive", "attribute"});
  std::vector<Value> kept;
  std::vector<Value> seen;
  for (const Value& item : iterate(operand)) {
    Value key = sort_key(item, args, 0, 1);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& other) { return equal(other, key); })) continue;
    seen.push_back(std::move(key));
    kept.push_back(item);
  }
  return Value::list(kept);
}

Value filter_sort(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("sort filter", arguments, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = args.has(0) && truthy(args.get(0));
  std::vector<std::pair<Value, Value>> keyed;  // (key, item)
  for (const Value& item : iterate(operand)) keyed.emplace_back(sort_key(item, args, 1, 2), item);
  // Python's sorted(reverse=True) keeps equal items in their original order, as this stable sort does.
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  std::vector<Value> sorted;
  for (auto& [key, item] : keyed) sorted.push_back(std::move(item));
  return Value::list(sorted);
}

Value min_or_max(const Value& operand, const Arguments& arguments, bool want_max) {
  const BoundArguments args(want_max ? "max filter" : "min filter", arguments, {"case_sensitive", "attribute"});
  std::optional<std::pair<Value, Value>> best;
  for (const Value& item : iterate(operand)) {
    Value key = sort_key(item, args, 0, 1);
    if (!best || compare(key, best->first) == (want_max ? 1 : -1)) best.emplace(std::move(key), item);
  }
  return best ? best->second : Value::undefined("No aggregated item, sequence was empty.");
}

Value filter_min(const Value& operand, const Arguments& arguments) { return min_or_max(operand, arguments, false); }
Value filter_max(const Value& operand, const Arguments& arguments) { return min_or_max(operand, arguments, true); }

Value filter_sum(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("sum filter", arguments, {"attribute", "start"});
  const std::optional<std::string> attribute = optional_string(args, 0);
  Value total = args.get_or(1, Value::integer(0));
  for (const Value& item : iterate(operand)) {
    const Value term = attribute ? get_attribute_path(item, *attribute) : item;
    if (total.kind() == Value::Kind::kFloat || term.kind() == Value::Kind::kFloat)
      total = Value::number(total.as_number() + term.as_number());
    else
      total = Value::integer(total.as_integer() + term.as_integer());
  }
  return total;
}

// Jinja's indent: every line but the first (and, with first=True, the first too) gets the indent; blank lines
// stay empty unless blank=True.
Value filter_indent(const Value& operand, const Arguments& arguments) {
  const BoundArguments args("indent filter", arguments, {"width", "first", "blank"});
  const Value width = args.get_or(0, Value::integer(4));
  const std::string indentation =
      width.is_string() ? width.as_string() : std::string(size_t(std::max<int64_t>(0, width.as_integer())), ' ');
  const bool first = args.has(1) && truthy(args.get(1));
  const bool blank = args.has(2) && truthy(args.get(2));
  const std::vector<std::string> lines = py::splitlines(to_str(operand) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += indentation;
    out += lines[i];
  }
  if (first) out = indentation + out;
  return Value::string(out);
}

Value filter_escape(const Value& operand, const Arguments&) {
  std::string out;
  for (const char c : to_str(operand)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value::string(out);
}

const std::unordered_map<std::string_view, FilterFunction>& filters() {
  static const std::unordered_map<std::string_view, FilterFunction> table = {
      {"trim", filter_trim},
      {"length", filter_length},
      {"count", filter_length},
      {"upper", filter_upper},
      {"lower", filter_lower},
      {"capitalize", filter_capitalize},
      {"title", filter_title},
      {"tojson", filter_tojson},
      {"string", filter_string},
      {"int", filter_int},
      {"float", filter_float},
      {"abs", filter_abs},
      {"join", filter_join},
      {"first", filter_first},
      {"last", filter_last},
      {"default", filter_default},
      {"d", filter_default},
      {"items", filter_items},
      {"dictsort", filter_dictsort},
      {"list", filter_list},
      {"replace", filter_replace},
      {"select", filter_select},
      {"reject", filter_reject},
      {"selectattr", filter_selectattr},
      {"rejectattr", filter_rejectattr},
      {"map", filter_map},
      {"safe", filter_safe},
      {"reverse", filter_reverse},
      {"unique", filter_unique},
      {"sort", filter_sort},
      {"min", filter_min},
      {"max", filter_max},
      {"sum", filter_sum},
      {"indent", filter_indent},
      {"escape", filter_escape},
      {"e", filter_escape},
  };
  return table;
}

const Value& test_argument(const Arguments& arguments, const std::string& name) {
  if (arguments.positional.size() != 1 || !arguments.keyword.empty()) fail("test '{}' takes one argument", name);
  return arguments.positional[0];
}

}  // namespace

bool is_supported_filter(std::string_view name) { return filters().count(name) != 0; }

bool is_supported_test(std::string_view name) {
  static const std::vector<std::string_view> names = {
      "defined",     "undefined", "none",    "string", "mapping",     "iterable", "sequence", "number",
      "integer",     "float",     "boolean", "true",   "false",       "callable", "odd",      "even",
      "divisibleby", "eq",        "equalto", "==",     "ne",          "!=",       "lt",       "lessthan",
      "<",           "le",        "<=",      "gt",     "greaterthan", ">",        "ge",       ">=",
      "in",          "sameas",    "lower",   "upper",  "filter",      "test",     "escaped"};
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value apply_filter(const std::string& name, const Value& operand, const Arguments& arguments) {
  const auto found = filters().find(name);
  if (found == filters().end()) fail("filter '{}' is not supported", name);
  return found->second(operand, arguments);
}

bool apply_test(const std::string& name, const Value& operand, const Arguments& arguments) {
  using Kind = Value::Kind;
  const Kind kind = operand.kind();
  if (name == "defined") return kind != Kind::kUndefined;
  if (name == "undefined") return kind == Kind::kUndefined;
  if (name == "none") return kind == Kind::kNone;
  if (name == "string") return kind == Kind::kString;
  if (name == "mapping") return kind == Kind::kDict;
  // Python's iter() and len()+[] accept Jinja's Undefined, so it passes both of these.
  if (name == "iterable" || name == "sequence")
    return kind == Kind::kString || kind == Kind::kList || kind == Kind::kDict || kind == Kind::kUndefined;
  if (name == "number") return operand.is_number();
  if (name == "integer") return kind == Kind::kInt;
  if (name == "float") return kind == Kind::kFloat;
  if (name == "boolean") return kind == Kind::kBool;
  if (name == "true") return kind == Kind::kBool && operand.data().get<bool>();
  if (name == "false") return kind == Kind::kBool && !operand.data().get<bool>();
  if (name == "callable") return kind == Kind::kFunction;
  if (name == "escaped") return false;
  // value % 2 == 1 and value % n == 0, with Python's % (so 3.0 is odd and 2.5 neither odd nor even).
  if (name == "odd") return equal(arithmetic("%", operand, Value::integer(2)), Value::integer(1));
  if (name == "even") return equal(arithmetic("%", operand, Value::integer(2)), Value::integer(0));
  if (name == "divisibleby") return equal(arithmetic("%", operand, test_argument(arguments, name)), Value::integer(0));
  if (name == "lower") return py::is_lower(to_str(operand));
  if (name == "upper") return py::is_upper(to_str(operand));
  if (name == "filter") return operand.is_string() && is_supported_filter(operand.as_string());
  if (name == "test") return operand.is_string() && is_supported_test(operand.as_string());
  const Value& other = test_argument(arguments, name);
  if (name == "eq" || name == "equalto" || name == "==") return equal(operand, other);
  if (name == "ne" || name == "!=") return !equal(operand, other);
  if (name == "lt" || name == "lessthan" || name == "<") return compare(operand, other) < 0;
  if (name == "le" || name == "<=") return compare(operand, other) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(operand, other) > 0;
  if (name == "ge" || name == ">=") return compare(operand, other) >= 0;
  if (name == "in") return contains(other, operand);
  if (name == "sameas") return operand.kind() == other.kind() && equal(operand, other);
  fail("test '{}' is not supported", name);
}

}  // namespace moetune::text::jinja
