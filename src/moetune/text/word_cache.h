// The BPE results of words already seen: word bytes -> ids. Text repeats its words, so most words of a text are
// looked up here rather than merged again; a lookup has to cost far less than a merge.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moetune::text {

// Open addressing over flat storage (no allocation per entry). A word of up to 8 bytes is kept inside its slot, and
// a single id too, so that a hit on a short word reads one cache line. It stops growing at a fixed number of
// entries, as HF's cache does: the frequent words of a text come early.
class WordCache {
 public:
  WordCache();
  // The ids cached for `word`, appended to `ids`; false when absent.
  bool append(std::string_view word, std::vector<int32_t>& ids) const;
  void insert(std::string_view word, const int32_t* ids, size_t count);

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;  // key_length of an unused slot
  struct Slot {
    uint64_t hash = 0;
    uint64_t short_key = 0;         // the word itself, zero-padded, when it has at most 8 bytes
    uint32_t key_length = kEmpty;
    uint32_t key_offset = 0;        // into keys_, for longer words
    uint32_t ids_length = 0;
    int32_t id_or_offset = 0;       // the id when there is one, else the offset of the ids in ids_
  };
  struct Key {
    std::string_view word;
    uint64_t short_key;
    uint64_t hash;
  };
  static Key key_of(std::string_view word);
  size_t find_slot(const Key& key) const;
  void grow();

  std::vector<Slot> slots_;
  size_t used_ = 0;
  std::string keys_;
  std::vector<int32_t> ids_;
};

}  // namespace moetune::text
