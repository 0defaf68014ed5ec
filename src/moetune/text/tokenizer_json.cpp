// Reading tokenizer.json into a Tokenizer. Every error names the file and the JSON key ("model.merges[12]").
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"
#include "moetune/io/regular_file.h"
#include "moetune/text/normalizer.h"
#include "moetune/text/tokenizer.h"
#include "moetune/text/tokenizer_config.h"
#include "moetune/text/utf8.h"

namespace moetune::text {

using nlohmann::json;

namespace {

// Ids index arrays of this size; a larger one is a broken file, not a vocabulary.
constexpr int64_t kMaxId = int64_t(1) << 26;

std::string index_key(const std::string& key, size_t index) { return fmt::format("{}[{}]", key, index); }
std::string member_key(const std::string& key, const char* name) { return key.empty() ? name : key + "." + name; }

}  // namespace

class TokenizerLoader {
 public:
  explicit TokenizerLoader(std::string source) : source_(std::move(source)) {}

  Tokenizer load(const json& root) {
    if (!root.is_object()) error("", fmt::format("expected a JSON object, got {}", root.type_name()));
    Tokenizer tokenizer;
    read_normalizer(tokenizer.normalizer_, optional_member(root, "normalizer"), "normalizer");
    const bool byte_level = read_pre_tokenizer(tokenizer.pre_tokenizer_, member(root, "", "pre_tokenizer"), "pre_tokenizer");
    tokenizer.model_ = read_model(member(root, "", "model"), "model", byte_level);
    read_decoder(tokenizer.decoder_, member(root, "", "decoder"), "decoder");
    read_post_processor(tokenizer, optional_member(root, "post_processor"), "post_processor");
    read_added_tokens(tokenizer, root);
    build_id_tables(tokenizer);
    return tokenizer;
  }

 private:
  [[noreturn]] void error(const std::string& key, const std::string& message) const {
    if (key.empty()) fail("{}: {}", source_, message);
    fail("{}: {}: {}", source_, key, message);
  }

  const json& member(const json& object, const std::string& key, const char* name) const {
    const std::string path = member_key(key, name);
    if (!object.is_object()) error(key, fmt::format("expected an object, got {}", io::abbreviated_dump(object)));
    auto found = object.find(name);
    if (found == object.end()) error(path, "missing");
    return *found;
  }
  // The member, or null when it is absent.
  const json& optional_member(const json& object, const char* name) const {
    static const json null;
    auto found = object.find(name);
    return found == object.end() ? null : *found;
  }
  std::string string(const json& value, const std::string& key) const {
    if (!value.is_string()) error(key, fmt::format("expected a string, got {}", io::abbreviated_dump(value)));
    return value.get<std::string>();
  }
  bool boolean(const json& object, const std::string& key, const char* name, bool fallback) const {
    const json& value = optional_member(object, name);
    if (value.is_null()) return fallback;
    if (!value.is_boolean()) error(member_key(key, name), fmt::format("expected true or false, got {}", io::abbreviated_dump(value)));
    return value.get<bool>();
  }
  int32_t id(const json& value, const std::string& key) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxId)
      error(key, fmt::format("expected a token id (an integer from 0 to {}), got {}", kMaxId - 1, io::abbreviated_dump(value)));
    return int32_t(value.get<int64_t>());
  }
  std::string type_of(const json& object, const std::string& key) const {
    return string(member(object, key, "type"), member_key(key, "type"));
  }
  [[noreturn]] void unsupported(const std::string& key, const json& value, const char* supported) const {
    error(key, fmt::format("{} is not supported (supported: {})", value.dump(), supported));
  }

  // null, NFC, Prepend, Replace (a String pattern), or a Sequence of them.
  void read_normalizer(Normalizer& normalizer, const json& value, const std::string& key) const {
    constexpr const char* kSupported = "null, NFC, Prepend, Replace with a String pattern, or a Sequence of them";
    if (value.is_null()) return;
    const std::string type = type_of(value, key);
    if (type == "NFC") return normalizer.add_nfc();
    if (type == "Prepend") return normalizer.add_prepend(string(member(value, key, "prepend"), member_key(key, "prepend")));
    if (type == "Replace") {
      const auto [pattern, content] = read_replace(value, key);
      return normalizer.add_replace(pattern, content);
    }
    if (type != "Sequence") unsupported(member_key(key, "type"), type, kSupported);
    const std::string list_key = member_key(key, "normalizers");
    const json& list = member(value, key, "normalizers");
    if (!list.is_array()) error(list_key, fmt::format("expected a list, got {}", io::abbreviated_dump(list)));
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string item_key = index_key(list_key, i);
      if (list[i].is_object() && list[i].value("type", "") == "Sequence") unsupported(member_key(item_key, "type"), "Sequence", "no Sequence inside a Sequence");
      read_normalizer(normalizer, list[i], item_key);
    }
  }

  // A Replace normalizer's or decoder's {"pattern": {"String": ...}, "content": ...}; a Regex pattern is refused.
  std::pair<std::string, std::string> read_replace(const json& value, const std::string& key) const {
    const std::string pattern_key = member_key(key, "pattern");
    const json& pattern = member(value, key, "pattern");
    if (!pattern.is_object() || !pattern.contains("String"))
      unsupported(pattern_key, pattern, "{\"String\": ...}");
    std::string text = string(pattern["String"], member_key(pattern_key, "String"));
    if (text.empty()) error(member_key(pattern_key, "String"), "an empty pattern");
    return {std::move(text), string(member(value, key, "content"), member_key(key, "content"))};
  }

  // Metaspace's settings, as tokenizers reads them: prepend_scheme "always", "first" or "never" (default "always";
  // files from before it say add_prefix_space), split (default true).
  Metaspace read_metaspace(const json& value, const std::string& key) const {
    Metaspace metaspace;
    const json& replacement = optional_member(value, "replacement");
    if (!replacement.is_null()) metaspace.replacement = string(replacement, member_key(key, "replacement"));
    if (metaspace.replacement.empty()) error(member_key(key, "replacement"), "an empty replacement");
    const json& scheme = optional_member(value, "prepend_scheme");
    if (!scheme.is_null()) {
      const std::string name = string(scheme, member_key(key, "prepend_scheme"));
      if (name == "always") metaspace.prepend = Metaspace::Prepend::Always;
      else if (name == "first") metaspace.prepend = Metaspace::Prepend::First;
      else if (name == "never") metaspace.prepend = Metaspace::Prepend::Never;
      else unsupported(member_key(key, "prepend_scheme"), scheme, "always, first, never");
    } else if (!boolean(value, key, "add_prefix_space", true)) {
      metaspace.prepend = Metaspace::Prepend::Never;
    }
    metaspace.split = boolean(value, key, "split", true);
    return metaspace;
  }

  // Returns true when the words are byte-level (a ByteLevel stage), false when they are text (Metaspace, or null:
  // the text between added tokens is one word).
  bool read_pre_tokenizer(PreTokenizer& pre_tokenizer, const json& value, const std::string& key) const {
    constexpr const char* kSupported = "null, Metaspace, ByteLevel, or a Sequence of Split stages ending in ByteLevel";
    if (value.is_null()) return false;
    const std::string type = type_of(value, key);
    if (type == "Metaspace") {
      pre_tokenizer.set_metaspace(read_metaspace(value, key));
      return false;
    }
    if (type == "ByteLevel") {
      read_byte_level(pre_tokenizer, value, key);
      return true;
    }
    if (type != "Sequence") unsupported(member_key(key, "type"), type, kSupported);
    const std::string list_key = member_key(key, "pretokenizers");
    const json& list = member(value, key, "pretokenizers");
    if (!list.is_array() || list.empty())
      error(list_key, fmt::format("expected a non-empty list, got {}", io::abbreviated_dump(list)));
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string item_key = index_key(list_key, i);
      const std::string item_type = type_of(list[i], item_key);
      const bool last = i + 1 == list.size();
      if (item_type == "Split" && !last) {
        read_split(pre_tokenizer, list[i], item_key);
      } else if (item_type == "ByteLevel" && last) {
        read_byte_level(pre_tokenizer, list[i], item_key);
      } else {
        unsupported(member_key(item_key, "type"), item_type,
                    last ? "ByteLevel as the last stage" : "Split before the final ByteLevel");
      }
    }
    return true;
  }

  void read_split(PreTokenizer& pre_tokenizer, const json& split, const std::string& key) const {
    const std::string behavior_key = member_key(key, "behavior");
    const std::string behavior = string(member(split, key, "behavior"), behavior_key);
    if (behavior != "Isolated") unsupported(behavior_key, behavior, "Isolated");
    if (boolean(split, key, "invert", false)) unsupported(member_key(key, "invert"), true, "false");
    const std::string pattern_key = member_key(key, "pattern");
    const json& pattern = member(split, key, "pattern");
    const bool literal = pattern.is_object() && pattern.contains("String");
    if (!pattern.is_object() || pattern.size() != 1 || !(literal || pattern.contains("Regex")))
      error(pattern_key, fmt::format("expected {{\"Regex\": ...}} or {{\"String\": ...}}, got {}", io::abbreviated_dump(pattern)));
    const std::string text = string(pattern.begin().value(), member_key(pattern_key, literal ? "String" : "Regex"));
    with_context(fmt::format("{}: {}", source_, pattern_key), [&] { pre_tokenizer.add_split(text, literal); });
  }

  void read_byte_level(PreTokenizer& pre_tokenizer, const json& byte_level, const std::string& key) const {
    // HF's defaults for a missing key: add_prefix_space true, use_regex true.
    pre_tokenizer.add_byte_level(boolean(byte_level, key, "add_prefix_space", true),
                                 boolean(byte_level, key, "use_regex", true));
  }

  BpeModel read_model(const json& model, const std::string& key, bool byte_level) const {
    if (!model.is_object()) error(key, fmt::format("expected an object, got {}", io::abbreviated_dump(model)));
    // Files from old tokenizers versions may leave out the type; HF then recognises BPE by its merges.
    const json& type = optional_member(model, "type");
    if (!(type.is_null() && model.contains("merges")) && string(type, member_key(key, "type")) != "BPE")
      unsupported(member_key(key, "type"), type, "BPE");
    BpeModel::Options options;
    options.byte_level = byte_level;
    // Not applied to byte-level words: every byte-level file's vocabulary holds the characters of all 256 bytes.
    options.byte_fallback = !byte_level && boolean(model, key, "byte_fallback", false);
    const json& dropout = optional_member(model, "dropout");
    if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0))
      unsupported(member_key(key, "dropout"), dropout, "null (deterministic encoding)");
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json& value = optional_member(model, affix);
      if (!value.is_null() && value != "") unsupported(member_key(key, affix), value, "null");
    }

    const std::string vocab_key = member_key(key, "vocab");
    const json& vocab_json = member(model, key, "vocab");
    if (!vocab_json.is_object())
      error(vocab_key, fmt::format("expected an object {{token: id}}, got {}", vocab_json.type_name()));
    StringToId vocab;
    vocab.reserve(vocab_json.size());
    for (const auto& [token, value] : vocab_json.items())
      vocab.emplace(token, id(value, member_key(vocab_key, token.c_str())));

    options.ignore_merges = boolean(model, key, "ignore_merges", false);
    options.fuse_unk = boolean(model, key, "fuse_unk", false);
    const json& unk = optional_member(model, "unk_token");
    if (!unk.is_null()) {
      const std::string unk_key = member_key(key, "unk_token");
      auto found = vocab.find(string(unk, unk_key));
      if (found == vocab.end()) error(unk_key, fmt::format("{} is not in the vocabulary", io::abbreviated_dump(unk)));
      options.unk_id = found->second;
    }
    auto merges = read_merges(member(model, key, "merges"), member_key(key, "merges"));
    try {
      return BpeModel(std::move(vocab), merges, options);
    } catch (const Error& e) {
      fail("{}: {}.{}", source_, key, e.what());  // BpeModel names the merge: "merges[12]: ..."
    }
  }

  // Both spellings: [["Ġ", "t"], ...] (tokenizers >= 0.20) and ["Ġ t", ...] (older files, GPT-2's).
  std::vector<std::pair<std::string, std::string>> read_merges(const json& list, const std::string& key) const {
    if (!list.is_array()) error(key, fmt::format("expected a list, got {}", list.type_name()));
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const json& merge = list[i];
      if (merge.is_string()) {
        const std::string& text = merge.get_ref<const std::string&>();
        const size_t space = text.find(' ');
        if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
          error(index_key(key, i), fmt::format("expected two tokens separated by one space, got {}", io::abbreviated_dump(merge)));
        merges.emplace_back(text.substr(0, space), text.substr(space + 1));
      } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      } else {
        error(index_key(key, i), fmt::format("expected [\"a\", \"b\"] or \"a b\", got {}", io::abbreviated_dump(merge)));
      }
    }
    return merges;
  }

  void read_decoder(Decoder& decoder, const json& value, const std::string& key) const {
    constexpr const char* kSupported = "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, or a Sequence of them";
    if (value.is_null()) unsupported(key, value, kSupported);
    const std::string type = type_of(value, key);
    if (type == "ByteLevel") return decoder.add_byte_level();
    if (type == "ByteFallback") return decoder.add_byte_fallback();
    if (type == "Fuse") return decoder.add_fuse();
    if (type == "Metaspace") {
      const Metaspace metaspace = read_metaspace(value, key);
      return decoder.add_metaspace(metaspace.replacement, metaspace.prepend != Metaspace::Prepend::Never);
    }
    if (type == "Replace") {
      const auto [pattern, content] = read_replace(value, key);
      return decoder.add_replace(pattern, content);
    }
    if (type == "Strip") {
      const std::string content = string(member(value, key, "content"), member_key(key, "content"));
      size_t one_character = 0;
      if (content.empty() || (utf8::find_invalid(content) == utf8::kValid && (utf8::next(content, one_character), one_character != content.size())))
        error(member_key(key, "content"), fmt::format("expected one character, got {}", io::abbreviated_dump(json(content))));
      return decoder.add_strip(content, count(value, key, "start"), count(value, key, "stop"));
    }
    if (type != "Sequence") unsupported(member_key(key, "type"), type, kSupported);
    const std::string list_key = member_key(key, "decoders");
    const json& list = member(value, key, "decoders");
    if (!list.is_array()) error(list_key, fmt::format("expected a list, got {}", io::abbreviated_dump(list)));
    for (size_t i = 0; i < list.size(); ++i) read_decoder(decoder, list[i], index_key(list_key, i));
  }

  size_t count(const json& object, const std::string& key, const char* name) const {
    const json& value = member(object, key, name);
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 1024)
      error(member_key(key, name), fmt::format("expected a count from 0 to 1024, got {}", io::abbreviated_dump(value)));
    return size_t(value.get<uint64_t>());
  }

  // The special tokens the post_processor puts around a text's ids: TemplateProcessing's before and after $A (its
  // "single" template; pairs are not encoded here); ByteLevel and null add none; a Sequence applies each in turn,
  // so a later template wraps what the earlier ones gave.
  void read_post_processor(Tokenizer& tokenizer, const json& processor, const std::string& key) const {
    if (processor.is_null()) return;
    const std::string type = type_of(processor, key);
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const std::string list_key = member_key(key, "processors");
      const json& list = member(processor, key, "processors");
      if (!list.is_array()) error(list_key, fmt::format("expected a list, got {}", list.type_name()));
      for (size_t i = 0; i < list.size(); ++i) read_post_processor(tokenizer, list[i], index_key(list_key, i));
      return;
    }
    if (type != "TemplateProcessing") unsupported(member_key(key, "type"), type, "TemplateProcessing, ByteLevel, Sequence");
    const std::string single_key = member_key(key, "single"), specials_key = member_key(key, "special_tokens");
    const json& single = member(processor, key, "single");
    const json& specials = member(processor, key, "special_tokens");
    if (!single.is_array()) error(single_key, fmt::format("expected a list, got {}", single.type_name()));
    std::vector<int32_t> before, after;
    bool seen_text = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string piece_key = index_key(single_key, i);
      if (single[i].is_object() && single[i].contains("Sequence")) {
        if (seen_text) error(piece_key, "a second sequence in a single-text template");
        seen_text = true;
        continue;
      }
      const std::string name = string(member(member(single[i], piece_key, "SpecialToken"), piece_key + ".SpecialToken", "id"),
                                      piece_key + ".SpecialToken.id");
      const std::string entry_key = specials_key + "." + name;
      const json& ids = member(member(specials, specials_key, name.c_str()), entry_key, "ids");
      if (!ids.is_array()) error(entry_key + ".ids", fmt::format("expected a list, got {}", ids.type_name()));
      for (size_t j = 0; j < ids.size(); ++j) (seen_text ? after : before).push_back(id(ids[j], index_key(entry_key + ".ids", j)));
    }
    if (!seen_text) error(single_key, "no {\"Sequence\": ...} for the text");
    tokenizer.prefix_ids_.insert(tokenizer.prefix_ids_.begin(), before.begin(), before.end());
    tokenizer.suffix_ids_.insert(tokenizer.suffix_ids_.end(), after.begin(), after.end());
  }

  // Ids as HF gives them on loading (the file's "id" is only checked there, with a warning): the vocabulary's id
  // when the content is a vocabulary token, else the next one from the vocabulary's size on, in file order.
  void read_added_tokens(Tokenizer& tokenizer, const json& root) const {
    const json& list = optional_member(root, "added_tokens");
    if (list.is_null()) return;
    if (!list.is_array()) error("added_tokens", fmt::format("expected a list, got {}", list.type_name()));
    const StringToId& vocab = tokenizer.model_.vocab();
    auto next_id = int32_t(vocab.size());
    std::vector<AddedToken>& tokens = tokenizer.added_tokens_;
    std::unordered_map<std::string, size_t> position;  // content -> index into tokens
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string key = index_key("added_tokens", i);
      AddedToken token;
      token.content = string(member(list[i], key, "content"), member_key(key, "content"));
      id(member(list[i], key, "id"), member_key(key, "id"));  // checked, as HF checks it
      token.special = boolean(list[i], key, "special", false);
      token.single_word = boolean(list[i], key, "single_word", false);
      token.lstrip = boolean(list[i], key, "lstrip", false);
      token.rstrip = boolean(list[i], key, "rstrip", false);
      token.normalized = boolean(list[i], key, "normalized", !token.special);
      if (token.content.empty()) continue;
      // A map from content to place: a linear search per token made 40,000 added tokens take 16 s.
      const auto [same, is_new] = position.emplace(token.content, tokens.size());
      if (!is_new) {  // a repeat updates the first one, as in HF
        token.id = tokens[same->second].id;
        tokens[same->second] = token;
        continue;
      }
      auto in_vocab = vocab.find(token.content);
      token.id = in_vocab != vocab.end() ? in_vocab->second : next_id++;
      if (token.id >= kMaxId) error(key, "too many added tokens");
      tokens.push_back(token);
    }
    std::vector<std::pair<std::string, AddedToken>> raw, normalized;
    for (const AddedToken& token : tokens) {
      if (!token.normalized) {
        raw.emplace_back(token.content, token);
      } else {
        std::string storage;
        normalized.emplace_back(std::string(tokenizer.normalizer_.apply(token.content, storage)), token);
      }
    }
    tokenizer.raw_matcher_ = AddedTokenMatcher(std::move(raw));
    tokenizer.normalized_matcher_ = AddedTokenMatcher(std::move(normalized));
  }

  void build_id_tables(Tokenizer& tokenizer) const {
    int32_t max_id = -1;
    for (const auto& [token, token_id] : tokenizer.model_.vocab()) max_id = std::max(max_id, token_id);
    for (const AddedToken& token : tokenizer.added_tokens_) max_id = std::max(max_id, token.id);
    const auto size = size_t(max_id + 1);
    tokenizer.tokens_.assign(size, std::string());
    tokenizer.kinds_.assign(size, Tokenizer::Kind::None);
    for (const auto& [token, token_id] : tokenizer.model_.vocab()) {
      if (tokenizer.kinds_[size_t(token_id)] != Tokenizer::Kind::None)
        error("model.vocab", fmt::format("id {} is given to both '{}' and '{}'", token_id,
                                         tokenizer.tokens_[size_t(token_id)], token));
      tokenizer.tokens_[size_t(token_id)] = token;
      tokenizer.kinds_[size_t(token_id)] = Tokenizer::Kind::Model;
    }
    for (const AddedToken& token : tokenizer.added_tokens_) {
      // HF decodes a normalized added token as its normalized content.
      std::string storage;
      tokenizer.tokens_[size_t(token.id)] = token.normalized ? std::string(tokenizer.normalizer_.apply(token.content, storage)) : token.content;
      tokenizer.kinds_[size_t(token.id)] = token.special ? Tokenizer::Kind::Special : Tokenizer::Kind::Added;
    }
  }

  std::string source_;
};

Tokenizer Tokenizer::from_json_text(std::string_view json_text, const std::string& source) {
  return TokenizerLoader(source).load(io::parse_json_text(json_text, source));
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  return from_json_text(io::read_regular_file(tokenizer_json, "the tokenizer", io::kMaxJsonFileBytes), tokenizer_json.string());
}

Tokenizer Tokenizer::from_folder(const std::filesystem::path& folder) {
  const std::filesystem::path path = folder / "tokenizer.json";
  nlohmann::json root = io::parse_json_text(io::read_regular_file(path, "the tokenizer", io::kMaxJsonFileBytes), path.string());
  apply_transformers_tokenizer_class(root, folder);
  return TokenizerLoader(path.string()).load(root);
}

}  // namespace moetune::text
