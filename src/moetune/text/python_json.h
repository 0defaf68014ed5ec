// Python's json.dumps, which transformers' `tojson` filter calls (ensure_ascii=False by default): its separators,
// its indentation, its float repr ("1.0", "1e+20") and its escapes, so that tool schemas and tool-call arguments
// render byte-identical to transformers. nlohmann's dump differs in all of those.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace moetune::text::py {

struct JsonDumpOptions {
  bool ensure_ascii = false;                  // escape every non-ASCII character as \uXXXX
  std::optional<std::string> indent;          // json.dumps(indent=...): None keeps one line; an int n is n spaces
  std::optional<std::string> item_separator;  // separators=(item, key); by default ", " (",": when indenting)
  std::optional<std::string> key_separator;   // by default ": "
  bool sort_keys = false;
};

// Key order is kept as the object holds it (an ordered_json keeps insertion order, like a Python dict).
std::string json_dumps(const nlohmann::ordered_json& value, const JsonDumpOptions& options = {});

}  // namespace moetune::text::py
