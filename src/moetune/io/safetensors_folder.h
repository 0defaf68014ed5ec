// The weights of a Hugging Face model folder: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json`. Both ways: read any such folder, write one with a maximum shard size.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "moetune/io/safetensors.h"

namespace moetune::io {

inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";

class SafetensorsFolder {
 public:
  // Errors name the folder and, for a shard that is missing or disagrees with the index, the shard.
  static SafetensorsFolder open(const std::filesystem::path& folder);
  // Whether `folder` holds weights open() would read (model.safetensors or its index).
  static bool holds_weights(const std::filesystem::path& folder);

  const std::filesystem::path& folder() const { return folder_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return location_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // zero-copy view of the shard's pages
  const SafetensorsFile& file_of(const std::string& name) const;
  size_t shard_count() const { return files_.size(); }

 private:
  std::filesystem::path folder_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> location_;  // tensor name -> index into files_
};

struct SaveOptions {
  size_t max_shard_bytes = size_t(5) << 30;  // transformers' default max_shard_size, 5 GB
};

// Writes `tensors` into `folder` in the given order: one file if they fit in one shard, else shards named
// model-0000i-of-0000N.safetensors plus the index. Each file is written atomically; weight files left by an
// earlier save that the new set does not use are removed.
void save_safetensors_folder(const std::filesystem::path& folder, const NamedTensors& tensors,
                             const SaveOptions& options = {});

// model.safetensors.index.json for shards written by several writers (expert-parallel ranks): which file holds
// each tensor, and the totals transformers records.
void write_safetensors_index(const std::filesystem::path& folder, const std::map<std::string, std::string>& weight_map,
                             size_t total_bytes, size_t total_parameters);

// "model-00002-of-00004.safetensors" for shard 1 (0-based) of 4.
std::string shard_file_name(size_t index, size_t count);

}  // namespace moetune::io
