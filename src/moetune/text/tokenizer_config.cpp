// How transformers 5.x builds a model folder's tokenizer beyond tokenizer.json. Two findings, checked with
// transformers 5.17 (tests/reference/make_sentencepiece_fixtures.py records them):
//  - tokenizer_config.json's add_bos_token / add_eos_token are dropped when the folder has a tokenizer.json
//    (PreTrainedTokenizerBase.from_pretrained pops them): the file's post_processor alone decides, so nothing is
//    read for them here.
//  - A Llama folder (config.json model_type "llama") whose tokenizer_config.json names LlamaTokenizer(Fast) gets
//    LlamaTokenizer's own pipeline around the file's vocabulary and merges: no normalizer, Metaspace with
//    prepend_scheme "first" ("always" when the config says legacy: true; "never" with add_prefix_space: false) and
//    no split, BPE with byte_fallback and fuse_unk and no unk token, the Replace/ByteFallback/Fuse(/Strip) decoder;
//    the file's post_processor stays. Llama-2's legacy files (a Prepend + Replace normalizer) encode differently
//    after an added token under tokenizers alone. Mistral and Mixtral folders keep their file as it is (transformers
//    uses TokenizersBackend for them without mistral_common).
#include "moetune/text/tokenizer_config.h"

#include "moetune/core/error.h"
#include "moetune/io/json_file.h"

namespace moetune::text {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_if_present(const fs::path& path) { return fs::exists(path) ? io::read_json_file(path) : json(); }

bool flag(const json& config, const char* key, bool fallback, const fs::path& source) {
  auto found = config.find(key);
  if (found == config.end() || found->is_null()) return fallback;
  if (!found->is_boolean()) fail("{}: {}: expected true or false, got {}", source.string(), key, io::abbreviated_dump(*found));
  return found->get<bool>();
}

// config.json is read only when tokenizer_config.json names the class.
bool is_llama_tokenizer_folder(const json& tokenizer_config, const fs::path& folder) {
  if (!tokenizer_config.is_object()) return false;
  const json name = tokenizer_config.value("tokenizer_class", json());
  if (name != "LlamaTokenizer" && name != "LlamaTokenizerFast") return false;
  const json model_config = read_if_present(folder / "config.json");
  return model_config.is_object() && model_config.value("model_type", json()) == "llama";
}

}  // namespace

void apply_transformers_tokenizer_class(json& tokenizer, const fs::path& folder) {
  const fs::path config_path = folder / "tokenizer_config.json";
  const json tokenizer_config = read_if_present(config_path);
  if (!is_llama_tokenizer_folder(tokenizer_config, folder)) return;
  if (!tokenizer.is_object() || !tokenizer.contains("model") || !tokenizer["model"].is_object()) return;  // the loader says what is wrong
  const bool add_prefix_space = flag(tokenizer_config, "add_prefix_space", true, config_path);
  const bool legacy = flag(tokenizer_config, "legacy", false, config_path);
  const char* scheme = !add_prefix_space ? "never" : legacy ? "always" : "first";
  tokenizer["normalizer"] = nullptr;
  tokenizer["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", false}};
  json& model = tokenizer["model"];
  model["byte_fallback"] = true;
  model["fuse_unk"] = true;
  model["unk_token"] = nullptr;
  model["ignore_merges"] = false;
  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                               {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
  if (add_prefix_space) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tokenizer["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
}

}  // namespace moetune::text
