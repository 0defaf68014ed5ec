// The JSONL files that a recipe's data.train / data.validation entries name. An entry is a file, a folder (its
// *.jsonl and *.jsonl.gz files, sorted by name; subfolders are not entered) or a glob pattern (`data/*.jsonl`,
// matches sorted). Gzip-compressed files (*.gz) are decompressed once into `scratch` (the loader seeks to each
// line, which a compressed stream cannot do) and read from there.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace moetune::data {

// `key` names the recipe key in errors ("data.train"). An entry that names nothing, a folder with no JSONL file
// and a pattern that matches none are Errors that say so. `entry_of_file`, when given, receives for each file the
// index of the entry that named it (for mixing weights by entry).
std::vector<std::filesystem::path> resolve_data_files(const std::vector<std::string>& entries, const std::string& key,
                                                      const std::filesystem::path& scratch,
                                                      std::vector<uint32_t>* entry_of_file = nullptr);

}  // namespace moetune::data
