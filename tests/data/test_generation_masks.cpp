// Chat templates with {% generation %} blocks: a model folder's messages lines must give the token ids and the
// scored tokens that transformers' apply_chat_template(..., return_assistant_tokens_mask=True) gives (fixture:
// tests/fixtures/chat_templates/generation_masks.json, made by tests/reference/make_generation_mask_fixtures.py),
// for a byte-level tokenizer with ChatML and a SentencePiece-style one with an [INST] template.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moetune/data/example.h"
#include "moetune/data/text_codec.h"
#include "test_util.h"

namespace moetune::data {
namespace {

const Json& fixture() {
  static const Json parsed = Json::parse(testing::read_file(testing::fixture("chat_templates/generation_masks.json")));
  return parsed;
}

// A model folder: a tiny model's config.json (its vocabulary widened to the tokenizer's), the tokenizer fixture and
// the template in tokenizer_config.json.
void make_folder(const std::filesystem::path& folder, const Json& setup) {
  Json config = Json::parse(testing::read_file(testing::fixture("qwen3_tiny/config.json")));
  config["vocab_size"] = 4096;
  testing::write_file(folder / "config.json", config.dump());
  testing::write_file(folder / "tokenizer.json",
                      testing::read_file(testing::fixture("tokenizers/" + setup["tokenizer"].get<std::string>() + "/tokenizer.json")));
  testing::write_file(folder / "tokenizer_config.json", setup["tokenizer_config"].dump());
}

class GenerationMasks : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerationMasks, MessagesGiveTransformersIdsAndAssistantMask) {
  const Json& setup = fixture()["folders"][GetParam()];
  testing::ScratchDir folder;
  make_folder(folder.path(), setup);
  const ModelText text = load_model_text(folder.path());
  const Json& conversations = fixture()["conversations"];
  for (size_t i = 0; i < conversations.size(); ++i) {
    SCOPED_TRACE("conversation " + std::to_string(i));
    const Example example = make_example(Json{{"messages", conversations[i]}}, Format::Messages, text.codec, false);
    EXPECT_EQ(example.ids, setup["results"][i]["input_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(std::vector<int>(example.scored.begin(), example.scored.end()),
              setup["results"][i]["assistant_masks"].get<std::vector<int>>());
  }
}

std::vector<std::string> folder_names() {
  std::vector<std::string> names;
  for (const auto& [name, value] : fixture()["folders"].items()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Folders, GenerationMasks, ::testing::ValuesIn(folder_names()),
                         [](const auto& instance) { return instance.param; });

}  // namespace
}  // namespace moetune::data
