#include "moetune/io/json_file.h"

#include <algorithm>
#include <optional>
#include <string>

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

// Python's json.dump writes float('inf') and float('nan') as bare Infinity / -Infinity / NaN, which json.load (so
// transformers) reads back; JSON has no spelling for them (some published Mamba2 / Nemotron-H configs hold
// "time_step_limit": [0.0, Infinity]). Outside strings JSON has no other bare word starting with I or N, so each
// such token is rewritten as transformers 5's {"__float__": "Infinity"}, which the config reader takes. Nothing to
// rewrite: nullopt (no copy).
std::optional<std::string> respell_python_floats(std::string_view text) {
  std::optional<std::string> out;
  bool in_string = false;
  size_t copied = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    for (std::string_view word : {std::string_view("-Infinity"), std::string_view("Infinity"), std::string_view("NaN")}) {
      if (text.substr(i, word.size()) != word) continue;
      if (!out) out.emplace();
      out->append(text.substr(copied, i - copied));
      out->append(fmt::format("{{\"__float__\": \"{}\"}}", word));
      i += word.size() - 1;
      copied = i + 1;
      break;
    }
  }
  if (out) out->append(text.substr(copied));
  return out;
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
  const std::optional<std::string> respelled = respell_python_floats(text);
  if (respelled) text = *respelled;
  try {
    return Json::parse(text);
  } catch (const typename Json::parse_error& e) {
    throw Error(fmt::format("{}not JSON (syntax error at byte {})", prefix(source), e.byte));
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
