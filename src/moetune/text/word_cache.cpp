#include "moetune/text/word_cache.h"

#include <cstring>

namespace moetune::text {
namespace {

constexpr size_t kMaxEntries = size_t(1) << 18;
constexpr uint64_t kMultiplier = 0x9E3779B97F4A7C15ull;

uint64_t load64(const char* at) {
  uint64_t value;
  std::memcpy(&value, at, 8);
  return value;
}

uint32_t load32(const char* at) {
  uint32_t value;
  std::memcpy(&value, at, 4);
  return value;
}

// Up to 8 bytes as one little-endian word, zero-padded, without a byte loop: two overlapping 4-byte loads (or three
// single bytes) put every byte where it belongs, and the overlap ORs a byte with itself.
uint64_t load_short(const char* data, size_t size) {
  if (size >= 4) return uint64_t(load32(data)) | uint64_t(load32(data + size - 4)) << (8 * (size - 4));
  if (size == 0) return 0;
  return uint64_t(uint8_t(data[0])) | uint64_t(uint8_t(data[size / 2])) << (8 * (size / 2)) |
         uint64_t(uint8_t(data[size - 1])) << (8 * (size - 1));
}

uint64_t mix(uint64_t hash, uint64_t value) {
  hash = (hash ^ value) * kMultiplier;
  return hash ^ (hash >> 29);
}

}  // namespace

WordCache::WordCache() : slots_(1024) {}

WordCache::Key WordCache::key_of(std::string_view word) {
  const char* data = word.data();
  const size_t size = word.size();
  if (size <= 8) {
    const uint64_t short_key = load_short(data, size);
    return {word, short_key, mix((size + 1) * kMultiplier, short_key)};
  }
  uint64_t hash = (size + 1) * kMultiplier;
  size_t pos = 0;
  for (; pos + 8 <= size; pos += 8) hash = mix(hash, load64(data + pos));
  return {word, 0, mix(hash, load_short(data + pos, size - pos))};
}

size_t WordCache::find_slot(const Key& key) const {
  const size_t mask = slots_.size() - 1;
  const size_t size = key.word.size();
  for (size_t index = size_t(key.hash) & mask;; index = (index + 1) & mask) {
    const Slot& slot = slots_[index];
    if (slot.key_length == kEmpty) return index;
    if (slot.hash != key.hash || slot.key_length != size) continue;
    if (size <= 8 ? slot.short_key == key.short_key
                  : std::memcmp(keys_.data() + slot.key_offset, key.word.data(), size) == 0)
      return index;
  }
}

bool WordCache::append(std::string_view word, std::vector<int32_t>& ids) const {
  const Slot& slot = slots_[find_slot(key_of(word))];
  if (slot.key_length == kEmpty) return false;
  if (slot.ids_length == 1) {
    ids.push_back(slot.id_or_offset);
  } else {
    const auto first = ids_.begin() + slot.id_or_offset;
    ids.insert(ids.end(), first, first + slot.ids_length);
  }
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t count) {
  if (used_ >= kMaxEntries) return;
  if (2 * (used_ + 1) > slots_.size()) grow();
  const Key key = key_of(word);
  Slot& slot = slots_[find_slot(key)];
  if (slot.key_length != kEmpty) return;
  slot.hash = key.hash;
  slot.short_key = key.short_key;
  slot.key_length = uint32_t(word.size());
  if (word.size() > 8) {
    slot.key_offset = uint32_t(keys_.size());
    keys_.append(word);
  }
  slot.ids_length = uint32_t(count);
  if (count == 1) {
    slot.id_or_offset = ids[0];
  } else {
    slot.id_or_offset = int32_t(ids_.size());
    ids_.insert(ids_.end(), ids, ids + count);
  }
  ++used_;
}

void WordCache::grow() {
  std::vector<Slot> old(slots_.size() * 2);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const Slot& slot : old) {
    if (slot.key_length == kEmpty) continue;
    size_t index = size_t(slot.hash) & mask;
    while (slots_[index].key_length != kEmpty) index = (index + 1) & mask;
    slots_[index] = slot;
  }
}

}  // namespace moetune::text
