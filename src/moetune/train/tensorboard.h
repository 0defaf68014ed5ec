// TensorBoard event files written directly: TFRecord framing (length, masked CRC-32C, payload, masked CRC-32C)
// around hand-encoded Event protobufs holding scalar summaries. Three message types and five fields do not
// justify a protobuf dependency; tests/reference/check_tensorboard.py reads the files with TensorBoard itself.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace moetune::train {

uint32_t crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::filesystem::path& folder);  // events.out.tfevents.<time>.<host>
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_event(const std::string& event_payload);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace moetune::train
