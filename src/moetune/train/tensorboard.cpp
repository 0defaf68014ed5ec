#include "moetune/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "moetune/core/error.h"
#include "moetune/io/regular_file.h"

namespace moetune::train {
namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));  // Castagnoli, reflected
    table[i] = crc;
  }
  return table;
}

// TFRecord masks its CRCs so that CRCs of CRCs stay well distributed.
uint32_t masked_crc(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protobuf wire encoding, just the pieces an Event needs.
void varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(char(value));
}
void field_key(std::string& out, uint32_t field, uint32_t wire_type) { varint(out, (uint64_t(field) << 3) | wire_type); }
template <typename T>
void fixed(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian, as x86 and ARM store it
  out.append(bytes, sizeof(T));
}
void bytes_field(std::string& out, uint32_t field, const std::string& payload) {
  field_key(out, field, 2);
  varint(out, payload.size());
  out += payload;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
std::string event(int64_t step, const std::string& body_field) {
  std::string out;
  field_key(out, 1, 1);
  fixed(out, wall_time());
  field_key(out, 2, 0);
  varint(out, uint64_t(step));
  return out + body_field;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  uint32_t crc = 0xffffffffu;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xffu] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& folder) {
  std::filesystem::create_directories(folder);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = folder / fmt::format("events.out.tfevents.{}.{}.{}", int64_t(wall_time()), host, ::getpid());
  file_ = io::open_for_writing(path_, io::WriteMode::kTruncate);
  std::string version;
  bytes_field(version, 3, "brain.Event:2");
  write_event(event(0, version));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string summary_value;
  bytes_field(summary_value, 1, tag);
  field_key(summary_value, 2, 5);
  fixed(summary_value, float(value));
  std::string summary;
  bytes_field(summary, 1, summary_value);
  std::string body;
  bytes_field(body, 5, summary);
  write_event(event(step, body));
}

void TensorBoardWriter::write_event(const std::string& payload) {
  const uint64_t length = payload.size();
  std::string record;
  fixed(record, length);
  fixed(record, masked_crc(&length, sizeof length));
  record += payload;
  fixed(record, masked_crc(payload.data(), payload.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size())
    fail("{}: write failed: {}", path_.string(), std::strerror(errno));
}

void TensorBoardWriter::flush() { std::fflush(file_); }

}  // namespace moetune::train
