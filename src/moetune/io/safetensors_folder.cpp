#include "moetune/io/safetensors_folder.h"

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "moetune/io/atomic_file.h"
#include "moetune/io/json_file.h"
#include "moetune/io/regular_file.h"

namespace moetune::io {

namespace fs = std::filesystem;
using nlohmann::json;

bool SafetensorsFolder::holds_weights(const fs::path& folder) {
  return fs::exists(folder / kIndexFileName) || fs::exists(folder / kSingleFileName);
}

SafetensorsFolder SafetensorsFolder::open(const fs::path& folder) {
  SafetensorsFolder result;
  result.folder_ = folder;
  if (!fs::is_directory(folder)) fail("{}: not a directory", folder.string());
  const fs::path index_path = folder / kIndexFileName;
  const fs::path single_path = folder / kSingleFileName;

  if (!fs::exists(index_path)) {
    if (!fs::exists(single_path))
      fail("{}: no weights: neither {} nor {} is there", folder.string(), kSingleFileName, kIndexFileName);
    result.files_.push_back(SafetensorsFile::open(single_path));
    for (const auto& entry : result.files_[0].entries()) result.location_[entry.name] = 0;
    return result;
  }

  json index;
  with_context(index_path.string(), [&] {
    index = parse_json_text(read_regular_file(index_path, "the index", kMaxJsonFileBytes), "");
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail("no \"weight_map\" object");
  });

  // Open each shard once, in the order the index first names it.
  std::map<std::string, size_t> shard_of_file;
  std::map<std::string, std::string> expected_shard;  // tensor -> file, as the index says
  for (auto& [tensor_name, file_value] : index["weight_map"].items()) {
    if (!file_value.is_string())
      fail("{}: weight_map entry '{}' is not a file name", index_path.string(), tensor_name);
    std::string file_name = file_value.get<std::string>();
    if (file_name.find('/') != std::string::npos || file_name == ".." || file_name.empty())
      fail("{}: weight_map entry '{}' names '{}', which is not a file in the folder", index_path.string(),
           tensor_name, file_name);
    expected_shard[tensor_name] = file_name;
    if (shard_of_file.count(file_name)) continue;
    if (!fs::exists(folder / file_name))
      fail("{}: shard '{}' (named for tensor '{}') is missing", index_path.string(), file_name, tensor_name);
    shard_of_file[file_name] = result.files_.size();
    result.files_.push_back(SafetensorsFile::open(folder / file_name));
  }
  for (size_t i = 0; i < result.files_.size(); ++i) {
    const SafetensorsFile& shard = result.files_[i];
    std::string shard_name = shard.path().filename().string();
    for (const auto& entry : shard.entries()) {
      auto listed = expected_shard.find(entry.name);
      if (listed == expected_shard.end())
        fail("{}: tensor '{}' is not in {}", shard.path().string(), entry.name, kIndexFileName);
      if (listed->second != shard_name)
        fail("{}: tensor '{}' is here but {} places it in '{}'", shard.path().string(), entry.name,
             kIndexFileName, listed->second);
      result.location_[entry.name] = i;
    }
  }
  for (const auto& [tensor_name, file_name] : expected_shard)
    if (!result.location_.count(tensor_name))
      fail("{}: tensor '{}' is listed for shard '{}' but that shard does not hold it", index_path.string(),
           tensor_name, file_name);
  return result;
}

std::vector<std::string> SafetensorsFolder::names() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : location_) names.push_back(name);
  return names;
}

const SafetensorsFile& SafetensorsFolder::file_of(const std::string& name) const {
  auto found = location_.find(name);
  if (found == location_.end()) fail("{}: no tensor '{}' in the weights", folder_.string(), name);
  return files_[found->second];
}

const SafetensorsEntry& SafetensorsFolder::entry(const std::string& name) const { return file_of(name).entry(name); }
Tensor SafetensorsFolder::tensor(const std::string& name) const { return file_of(name).tensor(name); }

void save_safetensors_folder(const fs::path& folder, const NamedTensors& tensors, const SaveOptions& options) {
  fs::create_directories(folder);
  // Greedy packing in the given order, as transformers does: a tensor larger than the limit gets a shard alone.
  std::vector<NamedTensors> shards(1);
  size_t shard_bytes = 0, total_bytes = 0, total_parameters = 0;
  for (const auto& named : tensors) {
    size_t nbytes = named.second.nbytes();
    if (!shards.back().empty() && shard_bytes + nbytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(named);
    shard_bytes += nbytes;
    total_bytes += nbytes;
    total_parameters += size_t(named.second.numel());
  }

  std::set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors(folder / kSingleFileName, shards[0]);
    written.insert(kSingleFileName);
  } else {
    std::map<std::string, std::string> weight_map;
    for (size_t i = 0; i < shards.size(); ++i) {
      std::string file_name = shard_file_name(i, shards.size());
      save_safetensors(folder / file_name, shards[i]);
      written.insert(file_name);
      for (const auto& [name, tensor] : shards[i]) weight_map[name] = file_name;
    }
    write_safetensors_index(folder, weight_map, total_bytes, total_parameters);
    written.insert(kIndexFileName);
  }
  // Weight files of an earlier save that would now mislead a reader (a stale index or shards): only names this
  // function writes, never a user's model_v1_backup.safetensors beside them.
  static const std::regex kShardName(R"(model-\d{5}-of-\d{5}\.safetensors)");
  for (const auto& item : fs::directory_iterator(folder)) {
    std::string name = item.path().filename().string();
    bool is_weights = name == kIndexFileName || name == kSingleFileName || std::regex_match(name, kShardName);
    if (is_weights && !written.count(name)) fs::remove(item.path());
  }
}

}  // namespace moetune::io

namespace moetune::io {

std::string shard_file_name(size_t index, size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

void write_safetensors_index(const fs::path& folder, const std::map<std::string, std::string>& weight_map,
                             size_t total_bytes, size_t total_parameters) {
  json index = {{"metadata", {{"total_size", total_bytes}, {"total_parameters", total_parameters}}},
                {"weight_map", weight_map}};
  write_text_atomically(folder / kIndexFileName, index.dump(2) + "\n");
}

}  // namespace moetune::io
