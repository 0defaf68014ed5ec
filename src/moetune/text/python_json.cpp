#include "moetune/text/python_json.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "moetune/core/error.h"
#include "moetune/text/python_str.h"

namespace moetune::text::py {

namespace {

using Json = nlohmann::ordered_json;

void append_unicode_escape(std::string& out, unsigned value) {
  std::array<char, 16> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "\\u%04x", value);
  out += buffer.data();
}

// json.encoder's py_encode_basestring(_ascii): the two-character escapes, \u00XX for other control characters and,
// with ensure_ascii, \uXXXX (a surrogate pair above U+FFFF) for everything outside ASCII.
void append_string(std::string& out, const std::string& text, bool ensure_ascii) {
  out += '"';
  const auto escape = [&](char32_t c) {
    switch (c) {
      case '"':
        out += "\\\"";
        return;
      case '\\':
        out += "\\\\";
        return;
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      case '\b':
        out += "\\b";
        return;
      case '\f':
        out += "\\f";
        return;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        append_unicode_escape(out, unsigned(0xD800 | (v >> 10)));
        append_unicode_escape(out, unsigned(0xDC00 | (v & 0x3FF)));
      } else {
        append_unicode_escape(out, unsigned(c));
      }
      return;
    }
    append_code_point(out, c);
  };
  if (is_ascii(text)) {
    for (const char c : text) escape(char32_t(c));
  } else {
    for (const char32_t c : decode(text)) escape(c);
  }
  out += '"';
}

std::string float_text(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  return float_repr(value);
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options)
      : options_(options),
        item_separator_(options.item_separator.value_or(options.indent ? "," : ", ")),
        key_separator_(options.key_separator.value_or(": ")) {}

  void dump(const Json& value, size_t depth) {
    switch (value.type()) {
      case Json::value_t::null:
        out_ += "null";
        return;
      case Json::value_t::boolean:
        out_ += value.get<bool>() ? "true" : "false";
        return;
      case Json::value_t::number_integer:
        out_ += std::to_string(value.get<int64_t>());
        return;
      case Json::value_t::number_unsigned:
        out_ += std::to_string(value.get<uint64_t>());
        return;
      case Json::value_t::number_float:
        out_ += float_text(value.get<double>());
        return;
      case Json::value_t::string:
        append_string(out_, value.get_ref<const std::string&>(), options_.ensure_ascii);
        return;
      case Json::value_t::array:
        dump_array(value, depth);
        return;
      case Json::value_t::object:
        dump_object(value, depth);
        return;
      default:
        fail("tojson: a {} value is not JSON serializable", value.type_name());
    }
  }

  std::string take() { return std::move(out_); }

 private:
  // Before an item: the item separator after the first, then a newline and the indent when indenting.
  void begin_item(bool first, size_t depth) {
    if (!first) out_ += item_separator_;
    newline(depth);
  }
  void newline(size_t depth) {
    if (!options_.indent) return;
    out_ += '\n';
    for (size_t i = 0; i < depth; ++i) out_ += *options_.indent;
  }

  void dump_array(const Json& value, size_t depth) {
    if (value.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    bool first = true;
    for (const Json& item : value) {
      begin_item(first, depth + 1);
      dump(item, depth + 1);
      first = false;
    }
    newline(depth);
    out_ += ']';
  }

  void dump_object(const Json& value, size_t depth) {
    if (value.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::string*> keys;
    std::vector<const Json*> values;
    for (auto it = value.begin(); it != value.end(); ++it) keys.push_back(&it.key()), values.push_back(&it.value());
    std::vector<size_t> order(keys.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (options_.sort_keys)
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return *keys[a] < *keys[b]; });
    out_ += '{';
    bool first = true;
    for (const size_t i : order) {
      begin_item(first, depth + 1);
      append_string(out_, *keys[i], options_.ensure_ascii);
      out_ += key_separator_;
      dump(*values[i], depth + 1);
      first = false;
    }
    newline(depth);
    out_ += '}';
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
  std::string out_;
};

}  // namespace

std::string json_dumps(const Json& value, const JsonDumpOptions& options) {
  Dumper dumper(options);
  dumper.dump(value, 0);
  return dumper.take();
}

}  // namespace moetune::text::py
