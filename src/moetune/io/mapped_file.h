// A read-only memory map of a whole file. Tensors read from a checkpoint borrow its pages (zero copy)
// and keep the map alive through a shared_ptr.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

namespace moetune::io {

class MappedFile {
 public:
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, const unsigned char* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::filesystem::path path_;
  const unsigned char* data_;
  size_t size_;
};

}  // namespace moetune::io
