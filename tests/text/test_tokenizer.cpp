// The tokenizer against HF tokenizers: every case of tests/fixtures/tokenizers/cases.json (made by
// tests/reference/make_tokenizer_fixtures.py) must give HF's ids and decode to HF's text, for both fixture files and
// for their variants; unsupported or broken tokenizer.json files must be Errors naming the file and the key.
#include <gtest/gtest.h>

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "moetune/core/error.h"
#include "moetune/text/known_patterns.h"
#include "moetune/text/normalizer.h"
#include "moetune/text/tokenizer.h"
#include "test_util.h"
#include "text/tokenizer_parity.h"

namespace moetune::text {
namespace {

using nlohmann::json;
using parity::expect_hf_parity;
using parity::with_edits;

const json& cases() {
  static const json parsed = json::parse(testing::read_file(testing::fixture("tokenizers/cases.json")));
  return parsed;
}

json base_spec(const std::string& name) {
  return json::parse(testing::read_file(testing::fixture("tokenizers/" + name + "/tokenizer.json")));
}

// A fixture tokenizer by name; a variant is its base file with the [JSON pointer, value] edits of cases.json.
Tokenizer load_named(const std::string& name, const testing::ScratchDir& scratch) {
  const json& variants = cases()["variants"];
  if (!variants.contains(name)) return Tokenizer::from_folder(testing::fixture("tokenizers/" + name));
  const json spec = with_edits(base_spec(variants[name]["base"]), variants[name]["edits"]);
  testing::write_file(scratch / (name + ".json"), spec.dump());
  return Tokenizer::from_file(scratch / (name + ".json"));
}

class HfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfParity, EveryCaseGivesHfIdsAndDecodesToHfText) {
  testing::ScratchDir scratch;
  expect_hf_parity(load_named(GetParam(), scratch), cases()["texts"], cases()["tokenizers"][GetParam()]);
}

std::vector<std::string> tokenizer_names() {
  std::vector<std::string> names;
  for (const auto& [name, value] : cases()["tokenizers"].items()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfParity, ::testing::ValuesIn(tokenizer_names()),
                         [](const auto& instance) { return instance.param; });

TEST(Tokenizer, CoversTheCasesAndVariantsMeantToBeChecked) {
  EXPECT_GE(cases()["texts"].size(), 60u);
  for (const char* name : {"qwen_style", "gpt2_style", "gpt2_prefix_space_ignore_merges", "llama3_regex",
                           "no_normalizer_string_split", "nfc_sequence_byte_level_regex", "llama3_template_processing"})
    EXPECT_TRUE(cases()["tokenizers"].contains(name)) << name;
}

TEST(Tokenizer, VariantEditsChangeIdsWhereTheyShould) {
  // Guards the fixtures: each variant must differ from its base on some case, or it checks nothing new.
  for (const auto& [name, variant] : cases()["variants"].items())
    EXPECT_TRUE(cases()["tokenizers"][name] != cases()["tokenizers"][variant["base"].get<std::string>()]) << name;
}

TEST(Tokenizer, LooksUpTokensAndIds) {
  const Tokenizer qwen = Tokenizer::from_folder(testing::fixture("tokenizers/qwen_style"));
  const json spec = base_spec("qwen_style");
  EXPECT_EQ(qwen.vocab_size(), int32_t(spec["model"]["vocab"].size() + spec["added_tokens"].size()));
  for (const json& added : spec["added_tokens"]) {
    const int32_t id = added["id"];
    EXPECT_EQ(qwen.token_to_id(added["content"].get<std::string>()), id);
    EXPECT_EQ(qwen.is_special(id), added["special"].get<bool>());
  }
  EXPECT_EQ(qwen.id_to_token(*qwen.token_to_id("<|im_start|>")), "<|im_start|>");
  const int32_t space = *qwen.token_to_id("\xC4\xA0");  // "Ġ", the space byte
  EXPECT_EQ(qwen.id_to_token(space), "\xC4\xA0");
  EXPECT_FALSE(qwen.is_special(space));
  EXPECT_FALSE(qwen.token_to_id("no such token").has_value());
  EXPECT_EQ(qwen.id_to_token(-1), "");
  EXPECT_EQ(qwen.id_to_token(qwen.vocab_size()), "");

  // GPT-2 keeps <|endoftext|> inside the model vocabulary; the added token takes that id.
  const Tokenizer gpt2 = Tokenizer::from_folder(testing::fixture("tokenizers/gpt2_style"));
  const json gpt2_vocab = base_spec("gpt2_style")["model"]["vocab"];
  EXPECT_EQ(gpt2.token_to_id("<|endoftext|>"), gpt2_vocab["<|endoftext|>"].get<int32_t>());
  EXPECT_TRUE(gpt2.is_special(*gpt2.token_to_id("<|endoftext|>")));
  EXPECT_EQ(gpt2.vocab_size(), int32_t(gpt2_vocab.size()));
}

TEST(Tokenizer, DecodeRepairsCutCharactersAndSkipsUnknownIds) {
  const Tokenizer qwen = Tokenizer::from_folder(testing::fixture("tokenizers/qwen_style"));
  const int32_t lead_byte = *qwen.token_to_id("\xC3\xA6");  // "æ" stands for byte 0xE6, a 3-byte lead
  const int32_t a = *qwen.token_to_id("a");
  EXPECT_EQ(qwen.decode({lead_byte, a}), "\xEF\xBF\xBD" "a");  // as HF: U+FFFD then "a"
  EXPECT_EQ(qwen.decode({-5, a, qwen.vocab_size(), 1 << 30}), "a");
}

TEST(Tokenizer, EncodeRejectsInvalidUtf8) {
  const Tokenizer qwen = Tokenizer::from_folder(testing::fixture("tokenizers/qwen_style"));
  try {
    qwen.encode("ok \xE6\x9C then");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 (at byte 3)"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, EncodesAlikeFromSeveralThreads) {
  const Tokenizer qwen = Tokenizer::from_folder(testing::fixture("tokenizers/qwen_style"));
  std::string text;
  for (const json& item : cases()["texts"]) text += item.get<std::string>() + "\n";
  const std::vector<int32_t> expected = qwen.encode(text);
  std::vector<std::vector<int32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results)
    threads.emplace_back([&] {
      for (int repeat = 0; repeat < 3; ++repeat) result = qwen.encode(text);
    });
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

// Random strings made of pieces chosen to sit on the edges the patterns and NFC care about.
std::string random_text(std::mt19937& rng, const std::vector<std::string>& pieces, size_t max_pieces) {
  std::string text;
  const size_t count = std::uniform_int_distribution<size_t>(0, max_pieces)(rng);
  for (size_t i = 0; i < count; ++i) text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
  return text;
}

std::vector<std::pair<size_t, size_t>> all_matches(const Regex& regex, std::string_view text) {
  std::vector<std::pair<size_t, size_t>> matches;
  size_t end = 0;
  for (size_t from = 0, start; (start = regex.find(text, from, end)) != std::string_view::npos; from = end) {
    matches.emplace_back(start, end);
    if (end == start) break;  // these patterns never match empty; stop rather than loop if one did
  }
  return matches;
}

TEST(KnownPatterns, AgreeWithPcre2OnRandomText) {
  const std::vector<std::string> pieces = {
      "a", "Z", "s", "S", "t", "T", "re", "RE", "vE", "m", "ll", "Ll", "d", "D", "\xC5\xBF" /* ſ */, "'",
      "\xE2\x80\x99" /* ’ */,
      "0", "7", "42", "\xD9\xA3" /* Arabic-Indic 3 */, "\xE2\x85\xAB" /* Roman XII */, "\xC2\xBD" /* ½ */, " ", "  ",
      "\t", "\r", "\n", "\r\n", "\v", "\f", "\xC2\xA0", "\xC2\x85", "\xE1\xA0\x8E", "\xE2\x80\xA8", "\xE3\x80\x80",
      ".", ",", "!", "?", "-", "_", "#", "(", ")", "\xE4\xB8\xAD" /* 中 */, "\xCC\x81" /* combining acute */,
      "\xF0\x9F\x98\x80" /* 😀 */, "\xE2\x80\x8D" /* ZWJ */, "\xF0\x91\xBC\x84" /* Kawi, Unicode 15 */, "\xC3\xA9"};
  const json qwen = base_spec("qwen_style")["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"];
  const json llama3 = cases()["variants"]["llama3_regex"]["edits"][0][1];
  std::mt19937 rng(20240607);
  for (const std::string& pattern : {qwen.get<std::string>(), llama3.get<std::string>(), std::string(kGpt2Pattern)}) {
    ASSERT_NE(known_pattern_matcher(pattern), nullptr) << pattern;
    const Regex fast(pattern, false), reference(pattern, false, Regex::Engine::Pcre2);
    for (int i = 0; i < 20000; ++i) {
      const std::string text = random_text(rng, pieces, 16);
      ASSERT_EQ(all_matches(fast, text), all_matches(reference, text)) << pattern << "\n" << json(text).dump();
    }
  }
  EXPECT_EQ(known_pattern_matcher("\\s+"), nullptr);
}

TEST(Normalizer, NfcByStretchesEqualsNfcOfTheWhole) {
  const std::vector<std::string> pieces = {
      "a", "e", "A", " ", "\xCC\x81" /* acute */, "\xCC\xA7" /* cedilla */, "\xCC\x88", "\xC3\xA9" /* é */,
      "\xE2\x84\xAB" /* Angstrom sign */, "\xE2\x84\xA6" /* Ohm */, "\xEF\xAC\x81" /* fi ligature */,
      "\xE1\x84\x80" /* jamo L */, "\xE1\x85\xA1" /* jamo V */, "\xE1\x86\xA8" /* jamo T */, "\xEA\xB0\x80" /* 가 */,
      "\xE3\x81\x8B" /* か */, "\xE3\x82\x99" /* voiced mark */, "\xE0\xAF\x86" /* Tamil e */,
      "\xE0\xAE\xBE" /* Tamil aa */, "\xEF\xA4\x80" /* CJK compatibility ideograph */, "\xE4\xB8\xAD", "x\n",
      "\xF0\x9F\x98\x80", "\xCD\x80" /* U+0340, a singleton */, "\xE0\xBD\xB3" /* U+0F73 */};
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const std::string text = random_text(rng, pieces, 12);
    utf8proc_uint8_t* whole = nullptr;
    const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
    const auto length = utf8proc_map(bytes, utf8proc_ssize_t(text.size()), &whole,
                                     utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    ASSERT_GE(length, 0);
    const std::string expected(reinterpret_cast<const char*>(whole), size_t(length));
    std::free(whole);
    std::string storage;
    ASSERT_EQ(std::string(nfc(text, storage)), expected) << json(text).dump();
  }
}

// A small valid tokenizer.json for the error tests to break, key by key.
json minimal_spec() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, "<unk>": 3}, "merges": [["a", "b"]]}})");
}

TEST(Tokenizer, UnknownBytesBecomeUnkFusedOrNotAsInHf) {
  // Ids from HF tokenizers 0.23 for the minimal file (" " and "c" are not in its vocabulary).
  testing::ScratchDir scratch;
  json spec = minimal_spec();
  testing::write_file(scratch / "fused.json", spec.dump());
  EXPECT_EQ(Tokenizer::from_file(scratch / "fused.json").encode("ccab cab"), (std::vector<int32_t>{3, 2, 3, 2}));
  spec["model"]["fuse_unk"] = false;
  testing::write_file(scratch / "unfused.json", spec.dump());
  EXPECT_EQ(Tokenizer::from_file(scratch / "unfused.json").encode("ccab cab"),
            (std::vector<int32_t>{3, 3, 2, 3, 3, 2}));
  spec["model"]["unk_token"] = nullptr;
  testing::write_file(scratch / "dropped.json", spec.dump());
  EXPECT_EQ(Tokenizer::from_file(scratch / "dropped.json").encode("ccab cab"), (std::vector<int32_t>{2, 2}));
}

// The message of the Error loading `text` as tokenizer.json gives, checked to name the file.
std::string load_error(const std::string& text) {
  testing::ScratchDir scratch;
  const auto path = scratch / "tokenizer.json";
  testing::write_file(path, text);
  try {
    Tokenizer::from_file(path);
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << message;
    return message;
  }
  ADD_FAILURE() << "no error for " << text;
  return "";
}

std::string load_error(const std::string& pointer, const json& value) {
  json spec = minimal_spec();
  if (value.is_discarded())
    spec.at(json::json_pointer(pointer).parent_pointer()).erase(json::json_pointer(pointer).back());
  else
    spec[json::json_pointer(pointer)] = value;
  return load_error(spec.dump());
}

const json kRemoved = json::value_t::discarded;

void expect_names(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

TEST(TokenizerErrors, MinimalSpecLoads) {
  testing::ScratchDir scratch;
  testing::write_file(scratch / "tokenizer.json", minimal_spec().dump());
  EXPECT_EQ(Tokenizer::from_folder(scratch.path()).encode("abab"), (std::vector<int32_t>{2, 2}));  // no "abab" merge
}

TEST(TokenizerErrors, UnsupportedComponentsNameTheKeyAndValue) {
  expect_names(load_error("/model/type", "WordPiece"), {": model.type: ", "\"WordPiece\" is not supported", "BPE"});
  expect_names(load_error("/model/dropout", 0.1), {"model.dropout: 0.1 is not supported"});
  expect_names(load_error("/model/continuing_subword_prefix", "##"), {"model.continuing_subword_prefix: \"##\""});
  expect_names(load_error("/normalizer", {{"type", "NFKC"}}), {"normalizer.type: \"NFKC\" is not supported"});
  expect_names(load_error("/normalizer", json::parse(R"({"type": "Sequence", "normalizers":
                          [{"type": "NFC"}, {"type": "Lowercase"}]})")),
               {"normalizer.normalizers[1].type: \"Lowercase\" is not supported"});
  expect_names(load_error("/pre_tokenizer", {{"type", "Metaspace"}, {"prepend_scheme", "sometimes"}}),
               {"pre_tokenizer.prepend_scheme: \"sometimes\" is not supported"});
  expect_names(load_error("/pre_tokenizer", {{"type", "Whitespace"}}), {"pre_tokenizer.type: \"Whitespace\""});
  expect_names(load_error("/post_processor", {{"type", "RobertaProcessing"}}),
               {"post_processor.type: \"RobertaProcessing\" is not supported", "TemplateProcessing"});
  expect_names(load_error("/post_processor", json::parse(R"({"type": "TemplateProcessing", "single":
                   [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                   "special_tokens": {}})")),
               {"post_processor.special_tokens.<s>: missing"});
  expect_names(load_error("/decoder", {{"type", "WordPiece"}}), {"decoder.type: \"WordPiece\" is not supported"});
  expect_names(load_error("/decoder", nullptr), {"decoder: null is not supported"});

  const json split = json::parse(R"({"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  json bad = split;
  bad["pretokenizers"][0]["behavior"] = "Removed";
  expect_names(load_error("/pre_tokenizer", bad), {"pre_tokenizer.pretokenizers[0].behavior: \"Removed\""});
  bad = split;
  bad["pretokenizers"][0]["invert"] = true;
  expect_names(load_error("/pre_tokenizer", bad), {"pre_tokenizer.pretokenizers[0].invert: true is not supported"});
  bad = split;
  bad["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
  expect_names(load_error("/pre_tokenizer", bad), {"pre_tokenizer.pretokenizers[0].pattern: ", "does not compile"});
  bad = split;
  bad["pretokenizers"][1]["type"] = "Digits";
  expect_names(load_error("/pre_tokenizer", bad), {"pre_tokenizer.pretokenizers[1].type: \"Digits\""});
}

TEST(TokenizerErrors, MalformedFilesNameTheKey) {
  expect_names(load_error("{\"model\": "), {"not JSON"});
  expect_names(load_error("[1, 2]"), {"expected a JSON object"});
  expect_names(load_error("/model", kRemoved), {": model: missing"});
  expect_names(load_error("/model/vocab", kRemoved), {": model.vocab: missing"});
  expect_names(load_error("/model/merges", kRemoved), {": model.merges: missing"});
  expect_names(load_error("/model/vocab/b", "one"), {"model.vocab.b: expected a token id"});
  expect_names(load_error("/model/merges/0", "ab"), {"model.merges[0]: expected two tokens separated by one space"});
  expect_names(load_error("/model/merges/0", json::array({"a", "z"})), {"model.merges[0]: 'z' is not in"});
  expect_names(load_error("/model/merges/0", json::array({"b", "a"})), {"model.merges[0]: the merged token 'ba'"});
  expect_names(load_error("/model/unk_token", "<missing>"),
               {"model.unk_token: \"<missing>\" is not in the vocabulary"});
  expect_names(load_error("/added_tokens", json::parse(R"([{"id": 4, "special": true}])")),
               {"added_tokens[0].content: missing"});
  expect_names(load_error("/added_tokens", json::parse(R"([{"id": -1, "content": "<s>"}])")),
               {"added_tokens[0].id: expected a token id"});
  expect_names(load_error("/pre_tokenizer/use_regex", "yes"), {"pre_tokenizer.use_regex: expected true or false"});
}

TEST(TokenizerErrors, MissingFileNamesIt) {
  testing::ScratchDir scratch;
  try {
    Tokenizer::from_folder(scratch.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    expect_names(e.what(), {(scratch / "tokenizer.json").string(), "cannot open"});
  }
}

}  // namespace
}  // namespace moetune::text
