#include "moetune/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "moetune/io/atomic_file.h"

namespace moetune::io {
namespace {

using nlohmann::json;

constexpr size_t kMaxHeaderBytes = 100u << 20;  // the safetensors library's own limit

// Parses the header, refusing duplicate top-level names (nlohmann would silently keep the last one).
json parse_header(const char* begin, const char* end) {
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(begin, end, callback);
  } catch (const json::exception& e) {
    fail("header is not JSON ({})", e.what());
  }
  if (!duplicate.empty()) fail("tensor '{}' appears more than once in the header", duplicate);
  if (!header.is_object()) fail("header is not a JSON object");
  return header;
}

size_t checked_multiply(size_t a, size_t b, const std::string& name) {
  if (a != 0 && b > std::numeric_limits<size_t>::max() / a) fail("tensor '{}': shape is too large", name);
  return a * b;
}

SafetensorsEntry parse_entry(const std::string& name, const json& value) {
  if (!value.is_object()) fail("tensor '{}': entry is not an object", name);
  auto dtype_field = value.find("dtype");
  auto shape_field = value.find("shape");
  auto offsets_field = value.find("data_offsets");
  if (dtype_field == value.end() || !dtype_field->is_string()) fail("tensor '{}': missing string 'dtype'", name);
  if (shape_field == value.end() || !shape_field->is_array()) fail("tensor '{}': missing array 'shape'", name);
  if (offsets_field == value.end() || !offsets_field->is_array() || offsets_field->size() != 2)
    fail("tensor '{}': 'data_offsets' must be [begin, end]", name);
  std::string dtype_text = dtype_field->get<std::string>();
  auto dtype = dtype_from_name(dtype_text);
  if (!dtype) fail("tensor '{}': unknown dtype '{}'", name, dtype_text);
  SafetensorsEntry entry{name, *dtype, {}, 0, 0};
  size_t expected_bytes = dtype_size(*dtype);
  for (const json& dimension : *shape_field) {
    if (!dimension.is_number_unsigned()) fail("tensor '{}': shape entries must be non-negative integers", name);
    uint64_t d = dimension.get<uint64_t>();
    if (d > uint64_t(std::numeric_limits<int64_t>::max())) fail("tensor '{}': dimension {} is too large", name, d);
    entry.shape.push_back(int64_t(d));
    expected_bytes = checked_multiply(expected_bytes, size_t(d), name);
  }
  for (const json& offset : *offsets_field)
    if (!offset.is_number_unsigned()) fail("tensor '{}': data_offsets must be non-negative integers", name);
  entry.begin = (*offsets_field)[0].get<size_t>();
  entry.end = (*offsets_field)[1].get<size_t>();
  if (entry.end < entry.begin) fail("tensor '{}': data_offsets [{}, {}] end before they begin", name, entry.begin, entry.end);
  if (entry.end - entry.begin != expected_bytes)
    fail("tensor '{}': shape {} of {} is {} bytes but data_offsets [{}, {}] span {}", name, shape_str(entry.shape),
         dtype_text, expected_bytes, entry.begin, entry.end, entry.end - entry.begin);
  return entry;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile result;
  result.file_ = MappedFile::open(path);
  with_context(path.string(), [&] {
    const MappedFile& file = *result.file_;
    if (file.size() < 8) fail("truncated: {} bytes, shorter than the 8-byte header length", file.size());
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | file.data()[i];
    if (header_bytes > file.size() - 8)
      fail("header length {} runs past the end of the file ({} bytes)", header_bytes, file.size());
    if (header_bytes > kMaxHeaderBytes) fail("header length {} exceeds the 100 MB limit", header_bytes);
    const char* header_text = reinterpret_cast<const char*>(file.data() + 8);
    json header = parse_header(header_text, header_text + header_bytes);
    result.data_start_ = 8 + size_t(header_bytes);
    const size_t data_bytes = file.size() - result.data_start_;

    for (auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) fail("__metadata__ is not an object");
        for (auto& [key, text] : value.items()) {
          if (!text.is_string()) fail("__metadata__ value '{}' is not a string", key);
          result.metadata_[key] = text.get<std::string>();
        }
        continue;
      }
      result.index_[name] = result.entries_.size();
      result.entries_.push_back(parse_entry(name, value));
    }

    // The data section must be covered exactly: sorted by offset, each tensor starts where the last ended.
    std::vector<const SafetensorsEntry*> by_offset;
    for (const auto& entry : result.entries_) by_offset.push_back(&entry);
    std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) {
      return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
    });
    size_t position = 0;
    const SafetensorsEntry* previous = nullptr;
    for (const SafetensorsEntry* entry : by_offset) {
      if (entry->end > data_bytes)
        fail("tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes)", entry->name,
             entry->begin, entry->end, data_bytes);
      if (entry->begin < position)
        fail("tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", entry->name, entry->begin,
             entry->end, previous->name, previous->begin, previous->end);
      if (entry->begin > position)
        fail("tensor '{}': gap of {} unused bytes before it at offset {}", entry->name, entry->begin - position,
             position);
      position = entry->end;
      previous = entry;
    }
    if (position != data_bytes)
      fail("{} bytes after the last tensor are not described by the header", data_bytes - position);
  });
  return result;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto found = index_.find(name);
  if (found == index_.end()) fail("{}: no tensor '{}'", path().string(), name);
  return entries_[found->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const unsigned char* bytes = file_->data() + data_start_ + e.begin;
  const size_t nbytes = e.end - e.begin;
  if (reinterpret_cast<uintptr_t>(bytes) % dtype_size(e.dtype) != 0) {
    Tensor copy = Tensor::empty(e.shape, e.dtype);
    std::memcpy(copy.raw_data(), bytes, nbytes);
    return copy;
  }
  // The storage borrows the mapped pages (read-only); the Tensor API hands out void*, so writers must
  // clone first. Keeping `file_` as the owner keeps the map alive as long as any view of it.
  auto storage = Storage::borrow(const_cast<unsigned char*>(bytes), nbytes, Device::cpu(), file_);
  return Tensor(std::move(storage), 0, e.shape, e.dtype);
}

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> ordered;
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    if (!names.insert(name).second) fail("{}: tensor '{}' given twice", path.string(), name);
    ordered.emplace_back(name, tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu()));
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    size_t size_a = dtype_size(a.second.dtype()), size_b = dtype_size(b.second.dtype());
    return size_a != size_b ? size_a > size_b : a.first < b.first;
  });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, tensor] : ordered) {
    header[name] = {{"dtype", dtype_name(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(header_text.size()) >> (8 * i));

  write_file_atomically(path, [&](std::FILE* file) {
    write_bytes(file, length, sizeof length, path);
    write_bytes(file, header_text.data(), header_text.size(), path);
    for (const auto& [name, tensor] : ordered) write_bytes(file, tensor.raw_data(), tensor.nbytes(), path);
  });
}

}  // namespace moetune::io
