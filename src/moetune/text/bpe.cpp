#include "moetune/text/bpe.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <memory>
#include <queue>

#include "moetune/core/error.h"
#include "moetune/text/byte_level.h"
#include "moetune/text/utf8.h"
#include "moetune/text/word_cache.h"

namespace moetune::text {
namespace {

// Words up to this many symbols merge by scanning all pairs each step (cheap for short words, no allocation);
// longer ones use a priority queue, as HF does for every word.
constexpr size_t kShortWord = 32;
constexpr size_t kMaxCachedWordBytes = 256;  // HF's cache skips longer words too

}  // namespace

BpeModel::BpeModel(StringToId vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options options)
    : vocab_(std::move(vocab)), options_(options) {
  static std::atomic<uint64_t> next_cache_key{1};
  cache_key_ = next_cache_key++;

  const auto& alphabet = byte_level_alphabet();
  for (size_t byte = 0; byte < 256; ++byte) {
    auto found = vocab_.find(options_.byte_level ? alphabet[byte] : fmt::format("<0x{:02X}>", byte));
    byte_ids_[byte] = found == vocab_.end() ? -1 : found->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto left_id = vocab_.find(left), right_id = vocab_.find(right), merged = vocab_.find(left + right);
    const char* missing = left_id == vocab_.end() ? left.c_str() : right_id == vocab_.end() ? right.c_str() : nullptr;
    if (missing) fail("merges[{}]: '{}' is not in the vocabulary", rank, missing);
    if (merged == vocab_.end()) fail("merges[{}]: the merged token '{}' is not in the vocabulary", rank, left + right);
    // A pair listed twice keeps its later rank, as HF's map does.
    merges_[pair_key(left_id->second, right_id->second)] = Merge{int32_t(rank), merged->second};
  }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  auto found = merges_.find(pair_key(left, right));
  return found == merges_.end() ? nullptr : &found->second;
}

void BpeModel::byte_symbols(std::string_view bytes, std::vector<int32_t>& symbols) const {
  bool unk_pending = false;  // an unk not yet added, so that a following unknown byte can fuse with it
  for (char byte : bytes) {
    const int32_t id = byte_ids_[uint8_t(byte)];
    if (id >= 0) {
      if (unk_pending) symbols.push_back(*options_.unk_id);
      unk_pending = false;
      symbols.push_back(id);
    } else if (options_.unk_id) {
      if (unk_pending && !options_.fuse_unk) symbols.push_back(*options_.unk_id);
      unk_pending = true;
    }
  }
  if (unk_pending) symbols.push_back(*options_.unk_id);
}

// As HF's BPE does it: a character in the vocabulary is its token; else its bytes' tokens when byte_fallback has
// them all; else an unk, held back so that the next unknown character can fuse with it. A held unk is added before
// the next known character, but after byte-fallback tokens (HF's order, kept for identical ids).
void BpeModel::character_symbols(std::string_view text, std::vector<int32_t>& symbols) const {
  bool unk_pending = false;
  for (size_t at = 0; at < text.size();) {
    const size_t start = at;
    utf8::next(text, at);
    const std::string_view character = text.substr(start, at - start);
    if (auto found = vocab_.find(character); found != vocab_.end()) {
      if (unk_pending) symbols.push_back(*options_.unk_id);
      unk_pending = false;
      symbols.push_back(found->second);
      continue;
    }
    if (options_.byte_fallback &&
        std::all_of(character.begin(), character.end(), [&](char byte) { return byte_ids_[uint8_t(byte)] >= 0; })) {
      for (char byte : character) symbols.push_back(byte_ids_[uint8_t(byte)]);
      continue;
    }
    if (!options_.unk_id) continue;  // dropped, as in HF
    if (unk_pending && !options_.fuse_unk) symbols.push_back(*options_.unk_id);
    unk_pending = true;
  }
  if (unk_pending) symbols.push_back(*options_.unk_id);
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& ids) const {
  if (bytes.empty()) return;
  if (options_.ignore_merges) {
    auto found = options_.byte_level ? vocab_.find(to_byte_level(bytes)) : vocab_.find(bytes);
    if (found != vocab_.end()) {
      ids.push_back(found->second);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  if (options_.byte_level)
    byte_symbols(bytes, symbols);
  else
    character_symbols(bytes, symbols);

  if (symbols.size() <= kShortWord)
    merge_short(symbols);
  else
    merge_long(symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& ids, WordCache& cache) const {
  if (cache.append(bytes, ids)) return;
  const size_t start = ids.size();
  encode_word(bytes, ids);
  if (bytes.size() <= kMaxCachedWordBytes) cache.insert(bytes, ids.data() + start, ids.size() - start);
}

void BpeModel::merge_short(std::vector<int32_t>& symbols) const {
  size_t count = symbols.size();
  std::array<Merge, kShortWord> pair{};  // pair[i]: the merge of symbols i and i + 1, rank INT32_MAX if none
  const auto lookup = [&](size_t i) {
    const Merge* merge = find_merge(symbols[i], symbols[i + 1]);
    pair[i] = merge ? *merge : Merge{INT32_MAX, -1};
  };
  for (size_t i = 0; i + 1 < count; ++i) lookup(i);
  while (count > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < count; ++i)
      if (pair[i].rank < pair[best].rank) best = i;
    if (pair[best].rank == INT32_MAX) break;
    symbols[best] = pair[best].id;
    for (size_t i = best + 1; i + 1 < count; ++i) {
      symbols[i] = symbols[i + 1];
      pair[i] = pair[i + 1];
    }
    --count;
    if (best > 0) lookup(best - 1);
    if (best + 1 < count) lookup(best);
  }
  symbols.resize(count);
}

// HF's algorithm: a min-queue of (rank, position) over a linked list of symbols; entries made stale by an earlier
// merge are recognised and skipped when popped.
void BpeModel::merge_long(std::vector<int32_t>& symbols) const {
  struct Candidate {
    int32_t rank;
    int32_t position;
    int32_t id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  const auto count = int32_t(symbols.size());
  std::vector<int32_t> previous(symbols.size()), next(symbols.size());
  std::vector<bool> removed(symbols.size(), false);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push = [&](int32_t position) {
    if (const Merge* merge = find_merge(symbols[size_t(position)], symbols[size_t(next[size_t(position)])]))
      queue.push({merge->rank, position, merge->id});
  };
  for (int32_t i = 0; i < count; ++i) {
    previous[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < count ? i + 1 : -1;
  }
  for (int32_t i = 0; i + 1 < count; ++i) push(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const auto at = size_t(top.position);
    if (removed[at] || next[at] < 0) continue;
    const auto right = size_t(next[at]);
    const Merge* merge = find_merge(symbols[at], symbols[right]);
    if (!merge || merge->id != top.id) continue;  // the pair changed since this entry was queued
    symbols[at] = top.id;
    removed[right] = true;
    next[at] = next[right];
    if (next[at] >= 0) previous[size_t(next[at])] = top.position;
    if (previous[at] >= 0) push(previous[at]);
    if (next[at] >= 0) push(top.position);
  }
  size_t kept = 0;
  for (size_t i = 0; i < symbols.size(); ++i)
    if (!removed[i]) symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

WordCache& BpeModel::thread_cache() const {
  // Keyed by model, so that tokenizers used by one thread keep apart; a thread that meets many models (tests) drops
  // the lot now and then rather than holding caches of models long gone.
  thread_local std::unordered_map<uint64_t, std::unique_ptr<WordCache>> caches;
  auto found = caches.find(cache_key_);
  if (found != caches.end()) return *found->second;
  if (caches.size() >= 16) caches.clear();
  return *caches.emplace(cache_key_, std::make_unique<WordCache>()).first->second;
}

}  // namespace moetune::text
