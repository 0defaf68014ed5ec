#include "moetune/text/tokenizer.h"

#include "moetune/core/error.h"
#include "moetune/text/normalizer.h"
#include "moetune/text/utf8.h"

namespace moetune::text {

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool starts_text) const {
  const size_t invalid = utf8::find_invalid(text);
  if (invalid != utf8::kValid) fail("tokenizer: the text to encode is not valid UTF-8 (at byte {})", invalid);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 2 + 1);  // a token takes 2 to 4 bytes in most text
  WordCache& cache = model_.thread_cache();

  // Scratch space kept by each thread, so that encoding many short texts does not allocate for it each time.
  thread_local std::vector<TextPiece> pieces, normalized_pieces;
  thread_local std::string normalized_storage;
  pieces.clear();
  raw_matcher_.split(text, pieces);
  for (const TextPiece& piece : pieces) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    // Each stretch between added tokens is normalized on its own, as HF does it.
    const std::string_view normalized = normalizer_.apply(piece.text, normalized_storage);
    const bool piece_starts_text = starts_text && piece.text.data() == text.data();
    if (normalized_matcher_.empty()) {
      encode_normalized(normalized, piece_starts_text, ids, cache);
      continue;
    }
    normalized_pieces.clear();
    normalized_matcher_.split(normalized, normalized_pieces);
    for (const TextPiece& inner : normalized_pieces) {
      if (inner.id >= 0)
        ids.push_back(inner.id);
      else
        encode_normalized(inner.text, piece_starts_text && inner.text.data() == normalized.data(), ids, cache);
    }
  }
  // Kept for the next call, but not without bound after one huge text.
  if (normalized_storage.capacity() > (size_t(64) << 20)) std::string().swap(normalized_storage);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_with_special_tokens(std::string_view text) const {
  std::vector<int32_t> ids = prefix_ids_;
  const std::vector<int32_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

void Tokenizer::encode_normalized(std::string_view text, bool starts_text, std::vector<int32_t>& ids, WordCache& cache) const {
  pre_tokenizer_.for_each_word(text, starts_text, [&](std::string_view word) { model_.encode_word(word, ids, cache); });
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    const Kind kind = kinds_[size_t(id)];
    if (kind == Kind::None || (skip_special_tokens && kind == Kind::Special)) continue;
    tokens.push_back(tokens_[size_t(id)]);
  }
  return decoder_.decode(std::move(tokens));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  // Added tokens first, as HF looks them up: their content may also be in the vocabulary under the same id.
  for (const AddedToken& added : added_tokens_)
    if (added.content == token) return added.id;
  auto found = model_.vocab().find(token);
  if (found == model_.vocab().end()) return std::nullopt;
  return found->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  return id >= 0 && id < vocab_size() ? tokens_[size_t(id)] : std::string();
}

}  // namespace moetune::text
