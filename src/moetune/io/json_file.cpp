#include "moetune/io/json_file.h"

#include <algorithm>

#include "moetune/core/error.h"
#include "moetune/io/regular_file.h"

namespace moetune::io {

namespace {

std::string prefix(const std::string& source) { return source.empty() ? "" : source + ": "; }

// A scan without recursion, before the parser sees the text: brackets inside strings do not count.
void check_nesting(std::string_view text, const std::string& source) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw Error(fmt::format("{}JSON nested deeper than {} levels (at byte {}); Python's json stops there too",
                                prefix(source), kMaxJsonDepth, i));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

template <typename Json>
std::string dump_abbreviated(const Json& value, size_t max_chars) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() <= max_chars) return text;
  const size_t total = text.size();
  text.resize(max_chars);
  return fmt::format("{}... ({} characters)", text, total);
}

}  // namespace

template <typename Json>
Json parse_json_text(std::string_view text, const std::string& source) {
  check_nesting(text, source);
  try {
    return Json::parse(text);
  } catch (const typename Json::parse_error& e) {
    // Python's json.dump writes float('inf') and NaN as bare Infinity / NaN, which JSON has no spelling for (some
    // published Mamba2 / Nemotron-H configs hold "time_step_limit": [0.0, Infinity]); say how to fix the file.
    const size_t from = e.byte > 16 ? size_t(e.byte) - 16 : 0;
    const std::string_view near = text.substr(std::min(from, text.size()), 32);
    const bool python_float = near.find("Infinity") != std::string_view::npos || near.find("NaN") != std::string_view::npos;
    throw Error(fmt::format("{}not JSON (syntax error at byte {}){}", prefix(source), e.byte,
                            python_float ? ": Infinity and NaN are Python's, not JSON; write the value as a number or as "
                                           "{\"__float__\": \"Infinity\"} (how transformers 5 saves it)"
                                         : ""));
  } catch (const typename Json::exception& e) {  // a number past double's range (1e309)
    throw Error(fmt::format("{}not JSON ({})", prefix(source), e.what()));
  }
}

template <typename Json>
Json read_json_file(const std::filesystem::path& path) {
  return parse_json_text<Json>(read_regular_file(path, "the JSON file", kMaxJsonFileBytes), path.string());
}

template nlohmann::json parse_json_text<nlohmann::json>(std::string_view, const std::string&);
template nlohmann::ordered_json parse_json_text<nlohmann::ordered_json>(std::string_view, const std::string&);
template nlohmann::json read_json_file<nlohmann::json>(const std::filesystem::path&);
template nlohmann::ordered_json read_json_file<nlohmann::ordered_json>(const std::filesystem::path&);

std::string abbreviated_dump(const nlohmann::json& value, size_t max_chars) { return dump_abbreviated(value, max_chars); }
std::string abbreviated_dump(const nlohmann::ordered_json& value, size_t max_chars) {
  return dump_abbreviated(value, max_chars);
}

}  // namespace moetune::io
