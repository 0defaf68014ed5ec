#include "moetune/data/data_files.h"

#include <glob.h>

#include <algorithm>

#include "moetune/core/error.h"
#include "moetune/data/gzip_file.h"
#include "moetune/io/regular_file.h"

namespace moetune::data {

namespace fs = std::filesystem;

namespace {

bool is_pattern(const std::string& entry) { return entry.find_first_of("*?[") != std::string::npos; }

bool is_data_file_name(const std::string& name) { return name.ends_with(".jsonl") || name.ends_with(".jsonl.gz"); }

std::vector<fs::path> matches(const std::string& pattern, const std::string& key) {
  glob_t found{};
  const int status = glob(pattern.c_str(), 0, nullptr, &found);  // sorted by name
  std::vector<fs::path> paths(found.gl_pathv, found.gl_pathv + found.gl_pathc);
  globfree(&found);
  if (status == GLOB_NOMATCH) fail("{}: the pattern '{}' matches no file", key, pattern);
  if (status != 0) fail("{}: cannot expand the pattern '{}'", key, pattern);
  return paths;
}

std::vector<fs::path> folder_files(const fs::path& folder, const std::string& key) {
  std::vector<fs::path> files;
  for (const auto& item : fs::directory_iterator(folder))
    if (item.is_regular_file() && is_data_file_name(item.path().filename().string())) files.push_back(item.path());
  if (files.empty()) fail("{}: the folder {} holds no *.jsonl or *.jsonl.gz file", key, folder.string());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<fs::path> resolve_data_files(const std::vector<std::string>& entries, const std::string& key,
                                         const fs::path& scratch, std::vector<uint32_t>* entry_of_file) {
  std::vector<fs::path> named;
  for (const std::string& entry : entries) {
    const size_t before = named.size();
    if (is_pattern(entry) && !fs::exists(entry)) {
      for (const fs::path& match : matches(entry, key))
        if (!fs::is_directory(match)) named.push_back(match);
    } else if (fs::is_directory(entry)) {
      const std::vector<fs::path> files = folder_files(entry, key);
      named.insert(named.end(), files.begin(), files.end());
    } else if (!fs::exists(entry)) {
      fail("{}: {} does not exist (an entry is a JSONL file, a folder of them, or a pattern such as data/*.jsonl)", key, entry);
    } else {
      named.emplace_back(entry);
    }
    if (entry_of_file) entry_of_file->insert(entry_of_file->end(), named.size() - before, uint32_t(&entry - entries.data()));
  }
  std::vector<fs::path> files;
  for (size_t i = 0; i < named.size(); ++i) {
    io::require_regular_file(named[i], "the data file");
    // Numbered, so that two files of one name in different folders stay apart.
    files.push_back(named[i].extension() == ".gz"
                        ? decompress_gzip(named[i], scratch / fmt::format("{}-{}", i, named[i].stem().string()))
                        : named[i]);
  }
  return files;
}

}  // namespace moetune::data
