// The BPE model of HF tokenizers (`"model": {"type": "BPE", ...}`): a vocabulary and ranked merges. Byte-level
// (GPT-2, Llama-3, Qwen): a pre-token's bytes start as one symbol per byte, each standing for its byte-level
// character. SentencePiece style (Llama-2, Mistral): one symbol per character, a character missing from the
// vocabulary taking its bytes' "<0xAB>" tokens (byte_fallback) or the unknown token. Then the adjacent pair of
// lowest merge rank (the leftmost among equals) is merged until no pair has a merge.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace moetune::text {

// Hashes std::string and std::string_view alike, so that maps keyed by std::string can be searched with a view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};
using StringToId = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class WordCache;  // word_cache.h

class BpeModel {
 public:
  struct Options {
    bool ignore_merges = false;     // a pre-token that is itself in the vocabulary is one token (Llama-3 sets it)
    std::optional<int32_t> unk_id;  // for bytes missing from the vocabulary; without it they are dropped, as in HF
    bool fuse_unk = false;          // consecutive unknown bytes (or characters) give one unk
    bool byte_level = true;         // symbols start as bytes in GPT-2's alphabet; false: as characters
    bool byte_fallback = false;     // (characters only) an unknown character as its bytes' "<0xAB>" tokens
  };

  BpeModel() = default;
  // Errors (without a file name: the caller adds it) for a merge whose parts or result are not in the vocabulary,
  // named by its index.
  BpeModel(StringToId vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options options);

  // Appends the ids of one pre-token, given as its raw bytes (the byte-level mapping happens here).
  void encode_word(std::string_view bytes, std::vector<int32_t>& ids) const;
  // The same, remembering each word's ids in this thread's cache for this model.
  void encode_word(std::string_view bytes, std::vector<int32_t>& ids, WordCache& cache) const;
  // This thread's cache of words already encoded by this model (thread-local, so encode stays const and safe to
  // call from several threads at once).
  WordCache& thread_cache() const;

  const StringToId& vocab() const { return vocab_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // the merged token
  };
  static uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }
  const Merge* find_merge(int32_t left, int32_t right) const;
  void byte_symbols(std::string_view bytes, std::vector<int32_t>& symbols) const;
  void character_symbols(std::string_view text, std::vector<int32_t>& symbols) const;
  void merge_short(std::vector<int32_t>& symbols) const;
  void merge_long(std::vector<int32_t>& symbols) const;

  StringToId vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // byte-level: the id of each byte's character; else of its "<0xAB>" token;
                                         // -1 when the vocabulary lacks it
  Options options_;
  uint64_t cache_key_ = 0;  // names this model's cache in each thread; copies share it, as they encode alike
};

}  // namespace moetune::text
