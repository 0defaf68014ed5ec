// JSON from files and lines that a user hands over. nlohmann's parser, copies and dump() recurse once per level,
// so a 100,000-deep array overflows the stack; like Python's json (which stops near 1000), nesting is limited,
// and the error names the source and the depth.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace moetune::io {

inline constexpr int kMaxJsonDepth = 1000;
// Far above any real config.json or tokenizer.json (a 250K-token vocabulary is ~15 MB).
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t(1) << 30;

// Parses `text`; errors start with "SOURCE: " (nothing when `source` is empty, for callers that add their own
// context, such as a file and line number). `Json` is nlohmann::json or nlohmann::ordered_json.
template <typename Json = nlohmann::json>
Json parse_json_text(std::string_view text, const std::string& source);

// A regular file of at most kMaxJsonFileBytes, parsed; errors name the file.
template <typename Json = nlohmann::json>
Json read_json_file(const std::filesystem::path& path);

// `value` as JSON text of at most `max_chars`: an error message quotes what it refuses without echoing 100 MB.
std::string abbreviated_dump(const nlohmann::json& value, size_t max_chars = 80);
std::string abbreviated_dump(const nlohmann::ordered_json& value, size_t max_chars = 80);

}  // namespace moetune::io
