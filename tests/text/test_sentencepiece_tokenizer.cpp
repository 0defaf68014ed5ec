// SentencePiece-style tokenizers (Llama-2, Mistral, Mixtral: Metaspace, byte_fallback, Prepend/Replace normalizers,
// their decoders) against HF: every case of tests/fixtures/tokenizers/spm_cases.json (made by
// tests/reference/make_sentencepiece_fixtures.py with tokenizers 0.23.3 and transformers 5.17.0) must give the ids
// HF tokenizers gives and decode to its text, for the file and each variant; and model folders must give the ids
// transformers' AutoTokenizer gives (tokenizer_config.json's tokenizer_class, legacy, add_prefix_space,
// add_bos_token / add_eos_token).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moetune/core/error.h"
#include "moetune/text/tokenizer.h"
#include "test_util.h"
#include "text/tokenizer_parity.h"

namespace moetune::text {
namespace {

using nlohmann::json;
using parity::expect_hf_parity;
using parity::with_edits;

const json& cases() {
  static const json parsed = json::parse(testing::read_file(testing::fixture("tokenizers/spm_cases.json")));
  return parsed;
}

// The fixture file with a variant's [JSON pointer, value] edits.
json variant_spec(const std::string& name) {
  const json spec = json::parse(testing::read_file(testing::fixture("tokenizers/spm_style/tokenizer.json")));
  return name == "spm_style" ? spec : with_edits(spec, cases()["variants"][name]["edits"]);
}

class SentencePieceParity : public ::testing::TestWithParam<std::string> {};

TEST_P(SentencePieceParity, EveryCaseGivesHfIdsAndDecodesToHfText) {
  const Tokenizer tokenizer = Tokenizer::from_json_text(variant_spec(GetParam()).dump(), GetParam());
  expect_hf_parity(tokenizer, cases()["texts"], cases()["tokenizers"][GetParam()]);
}

std::vector<std::string> names_of(const char* section) {
  std::vector<std::string> names;
  for (const auto& [name, value] : cases()[section].items()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, SentencePieceParity, ::testing::ValuesIn(names_of("tokenizers")),
                         [](const auto& instance) { return instance.param; });

class TransformersFolderParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformersFolderParity, FolderGivesTransformersIds) {
  const json& setup = cases()["configs"][GetParam()];
  testing::ScratchDir folder;
  testing::write_file(folder / "tokenizer.json", variant_spec(setup["variant"]).dump());
  testing::write_file(folder / "tokenizer_config.json", setup["tokenizer_config"].dump());
  if (!setup["model_type"].is_null()) testing::write_file(folder / "config.json", json{{"model_type", setup["model_type"]}}.dump());
  const Tokenizer tokenizer = Tokenizer::from_folder(folder.path());
  const json& texts = cases()["texts"];
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + texts[i].dump());
    EXPECT_EQ(tokenizer.encode_with_special_tokens(texts[i].get<std::string>()), setup["ids"][i].get<std::vector<int32_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Folders, TransformersFolderParity, ::testing::ValuesIn(names_of("configs")),
                         [](const auto& instance) { return instance.param; });

TEST(SentencePieceTokenizer, FixturesCoverWhatTheyAreMeantTo) {
  for (const char* name : {"spm_style", "spm_legacy_normalizer", "spm_metaspace_always_split", "spm_never_no_fallback",
                           "spm_fuse_unk_ignore_merges", "spm_template_processing"})
    EXPECT_TRUE(cases()["tokenizers"].contains(name)) << name;
  for (const auto& [name, variant] : cases()["variants"].items())
    if (cases()["tokenizers"].contains(name))
      EXPECT_TRUE(cases()["tokenizers"][name] != cases()["tokenizers"]["spm_style"]) << name;
  // The Llama class and the legacy file must disagree somewhere, or the folder test checks nothing.
  EXPECT_TRUE(cases()["configs"]["llama_class"]["ids"] != cases()["configs"]["mistral_keeps_file"]["ids"]);
  // Byte fallback is exercised: some case holds a "<0xAB>" token.
  const Tokenizer tokenizer = Tokenizer::from_json_text(variant_spec("spm_style").dump(), "spm_style");
  const int32_t byte_token = *tokenizer.token_to_id("<0xF0>");
  bool seen = false;
  for (const json& result : cases()["tokenizers"]["spm_style"])
    for (const json& id : result["ids"]) seen = seen || id == byte_token;
  EXPECT_TRUE(seen);
}

TEST(SentencePieceTokenizer, ContinuationGetsNoFirstPrefix) {
  // Encoding a text piece by piece (chat data) must not put the "first" prefix before a piece inside the text.
  const Tokenizer tokenizer = Tokenizer::from_json_text(variant_spec("spm_style").dump(), "spm_style");
  std::vector<int32_t> after_token = tokenizer.encode("</s>Hello");
  after_token.erase(after_token.begin());
  EXPECT_EQ(tokenizer.encode("Hello", /*starts_text=*/false), after_token);
  EXPECT_NE(tokenizer.encode("Hello"), after_token);
}

// The Error message of loading `spec`; fails the test when it loads.
std::string load_error(const json& spec) {
  try {
    Tokenizer::from_json_text(spec.dump(), "t.json");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "loaded";
  return "";
}

TEST(SentencePieceTokenizer, UnsupportedSettingsNameTheKey) {
  json spec = variant_spec("spm_style");
  spec["pre_tokenizer"]["prepend_scheme"] = "sometimes";
  EXPECT_NE(load_error(spec).find("t.json: pre_tokenizer.prepend_scheme"), std::string::npos) << load_error(spec);
  spec = variant_spec("spm_style");
  spec["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "\u2581"}};
  EXPECT_NE(load_error(spec).find("t.json: normalizer.pattern"), std::string::npos) << load_error(spec);
  spec = variant_spec("spm_style");
  spec["decoder"]["decoders"][3]["content"] = "ab";
  EXPECT_NE(load_error(spec).find("t.json: decoder.decoders[3].content: expected one character"), std::string::npos) << load_error(spec);
  spec = variant_spec("spm_style");
  spec["decoder"] = {{"type", "CTC"}};
  EXPECT_NE(load_error(spec).find("t.json: decoder.type: \"CTC\" is not supported"), std::string::npos) << load_error(spec);
}

}  // namespace
}  // namespace moetune::text
