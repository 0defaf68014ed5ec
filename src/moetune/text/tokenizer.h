// A Hugging Face `tokenizer.json` BPE tokenizer, byte-level as Qwen2/Qwen3, Llama-3 and GPT-2 ship it, or
// SentencePiece style as Llama-2, Mistral and Mixtral do, giving the same ids as HF `tokenizers`
// (`encode(text, add_special_tokens=False)`) and the same text back from decode.
//
// Encoding follows HF's order: added tokens are cut out of the text first (those with normalized = false from the
// text as given, the others from the normalized text), the rest is normalized, pre-tokenized and each word
// BPE-encoded, with the ids of words seen before taken from a cache.
//
// Supported in tokenizer.json (anything else is an Error naming the file, the key and the value):
//   normalizer     null, NFC, Prepend, Replace (String pattern), or a Sequence of them
//   pre_tokenizer  null, Metaspace (prepend_scheme always/first/never, split), ByteLevel, or a Sequence of Split
//                  {Regex or String pattern, behavior Isolated, invert false} stages ending in ByteLevel
//   model          BPE: vocab, merges as ["a", "b"] pairs or "a b" strings, ignore_merges, unk_token / fuse_unk,
//                  byte_fallback; no dropout, no continuing_subword_prefix or end_of_word_suffix
//   decoder        ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, or a Sequence of them
//   post_processor null, ByteLevel, TemplateProcessing (its single-text template: Llama-3's <|begin_of_text|>), or a
//                  Sequence of them; applied by encode_with_special_tokens only
// from_folder builds the tokenizer as transformers 5.x does for the folder (tokenizer_config.h): LlamaTokenizer's
// own pipeline for Llama folders; tokenizer_config.json's add_bos_token / add_eos_token are ignored, as there.
// Not applied: truncation and padding (the data pipeline sets lengths).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moetune/text/added_tokens.h"
#include "moetune/text/bpe.h"
#include "moetune/text/decoder.h"
#include "moetune/text/normalizer.h"
#include "moetune/text/pre_tokenizer.h"

namespace moetune::text {

class Tokenizer {
 public:
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  static Tokenizer from_folder(const std::filesystem::path& folder);  // folder/tokenizer.json, as transformers takes it
  // `source` names the text in error messages.
  static Tokenizer from_json_text(std::string_view json_text, const std::string& source);

  // The ids of `text`, without special tokens added. Text that is not valid UTF-8 is an Error. `starts_text`:
  // false when `text` continues a text encoded piece by piece (Metaspace's "first" prefix goes before the start of
  // a text only).
  std::vector<int32_t> encode(std::string_view text, bool starts_text = true) const;
  // The ids of `text` with the special tokens the post_processor adds around them, as HF's encode(text) (and
  // transformers' tokenizer(text)) gives them.
  std::vector<int32_t> encode_with_special_tokens(std::string_view text) const;
  const std::vector<int32_t>& prefix_ids() const { return prefix_ids_; }  // what the post_processor puts before a text
  const std::vector<int32_t>& suffix_ids() const { return suffix_ids_; }  // and after it
  // The text of `ids`, as HF's decode gives it: invalid UTF-8 (a character cut between tokens) becomes U+FFFD, and
  // ids that name no token are skipped (a model's vocabulary is often padded past the tokenizer's).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as the vocabulary spells it ("Ġthe"), or "" when the id names no token.
  std::string id_to_token(int32_t id) const;
  // The highest id plus one, counting added tokens.
  int32_t vocab_size() const { return int32_t(tokens_.size()); }
  bool is_special(int32_t id) const { return id >= 0 && id < vocab_size() && kinds_[size_t(id)] == Kind::Special; }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }

 private:
  enum class Kind : uint8_t { None, Model, Added, Special };
  friend class TokenizerLoader;
  Tokenizer() = default;
  void encode_normalized(std::string_view text, bool starts_text, std::vector<int32_t>& ids, WordCache& cache) const;

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  BpeModel model_;
  std::vector<AddedToken> added_tokens_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher_;  // the others, by their normalized content
  std::vector<std::string> tokens_;       // by id: the token string ("" for an id that names none)
  Decoder decoder_;
  std::vector<Kind> kinds_;               // by id
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // the post_processor's special tokens before and after a text
};

}  // namespace moetune::text
