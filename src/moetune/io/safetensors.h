// The safetensors format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the bytes. Reading maps the file and hands out zero-copy views; every
// malformation is an Error naming the file and the tensor.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/io/mapped_file.h"

namespace moetune::io {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  size_t begin;  // byte range within the data section, end exclusive
  size_t end;
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_->path(); }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  // A CPU tensor over the file's pages; copied only when the bytes are not aligned to the dtype's size.
  Tensor tensor(const std::string& name) const;

 private:
  std::shared_ptr<const MappedFile> file_;
  size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes as the `safetensors` library does: tensors sorted by dtype size (largest first) then name so each
// starts aligned, the header padded with spaces to 8 bytes, metadata {"format": "pt"} unless given.
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace moetune::io
