// Reading the JSON-lines files runs write (metrics.jsonl), for the tests that compare runs record by record.
#pragma once

#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

namespace moetune::testing {

// One JSON value per non-empty line of `file`; no lines when it does not exist.
std::vector<nlohmann::json> read_json_lines(const std::filesystem::path& file);

}  // namespace moetune::testing
