// The real chat templates that PyPI's trl wheel ships, rendered here and by transformers (fixture:
// tests/fixtures/chat_templates/trl_sweep.json, made by tests/reference/make_template_sweep.py): every conversation
// must render byte for byte as transformers renders it (or fail where it fails), and where a template has
// {% generation %} blocks, they must mark the same text as transformers' return_assistant_tokens_mask. The
// templates are not in this repository: MOETUNE_TRL_TEMPLATES names the unpacked wheel's trl/chat_templates folder;
// without it the test skips.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>

#include "moetune/core/error.h"
#include "moetune/text/chat_template.h"
#include "moetune/text/jinja_template.h"
#include "test_util.h"

namespace moetune::text {
namespace {

using OrderedJson = nlohmann::ordered_json;

uint64_t fnv1a64(const std::string& data) {
  uint64_t value = 0xCBF29CE484222325ull;
  for (unsigned char byte : data) value = (value ^ byte) * 0x100000001B3ull;
  return value;
}

TEST(TemplateSweep, RealTemplatesRenderAsTransformersRendersThem) {
  const char* folder = std::getenv("MOETUNE_TRL_TEMPLATES");
  if (!folder || !*folder) GTEST_SKIP() << "MOETUNE_TRL_TEMPLATES is not set (make_template_sweep.py says how)";
  const OrderedJson sweep = OrderedJson::parse(testing::read_file(testing::fixture("chat_templates/trl_sweep.json")));
  std::vector<std::pair<std::string, std::string>> special_tokens;
  for (const auto& [name, text] : sweep["special_tokens"].items()) special_tokens.emplace_back(name, text.get<std::string>());
  std::tm fixed_time{};
  fixed_time.tm_year = 2025 - 1900, fixed_time.tm_mon = 7, fixed_time.tm_mday = 5, fixed_time.tm_hour = 14,
  fixed_time.tm_min = 30, fixed_time.tm_wday = 2, fixed_time.tm_yday = 216;

  size_t rendered = 0, failed_alike = 0, marked = 0;
  for (const OrderedJson& record : sweep["cases"]) {
    const std::string name = record["template"];
    const std::string source = testing::read_file(std::filesystem::path(folder) / name);
    ASSERT_EQ(fnv1a64(source), std::stoull(sweep["templates"][name]["fnv1a64"].get<std::string>(), nullptr, 16))
        << name << " differs from the file the fixture was made with";
    SCOPED_TRACE(name + " / " + record["conversation"].get<std::string>());
    std::optional<ChatTemplate> compiled;
    try {
      compiled = ChatTemplate::from_string(source, name, special_tokens);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    ChatTemplate& chat = *compiled;
    chat.set_fixed_time(fixed_time);
    const OrderedJson& conversation = sweep["conversations"][record["conversation"].get<std::string>()];
    const bool add_generation_prompt = conversation["add_generation_prompt"];
    if (record.contains("expected_error")) {
      EXPECT_THROW(chat.apply(conversation["messages"], add_generation_prompt, conversation["extra"]), Error)
          << "transformers: " << record["expected_error"].get<std::string>();
      ++failed_alike;
      continue;
    }
    std::string text;
    try {
      text = chat.apply(conversation["messages"], add_generation_prompt, conversation["extra"]);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(text, record["expected"].get<std::string>());
    rendered += text == record["expected"].get<std::string>();
    if (!record.contains("generation_spans")) continue;
    EXPECT_TRUE(chat.has_generation_blocks(conversation["extra"].contains("tools")));
    std::vector<jinja::GenerationSpan> spans;
    EXPECT_EQ(chat.apply_marking_generation(conversation["messages"], conversation["extra"], spans), text);
    std::vector<std::pair<size_t, size_t>> got;
    for (const auto& span : spans) got.emplace_back(span.begin, span.end);
    std::vector<std::pair<size_t, size_t>> expected;
    for (const OrderedJson& span : record["generation_spans"]) expected.emplace_back(span[0].get<size_t>(), span[1].get<size_t>());
    EXPECT_EQ(got, expected);
    marked += got == expected;
  }
  std::printf("%zu renderings identical, %zu refused alike, %zu with identical generation spans\n", rendered,
              failed_alike, marked);
}

}  // namespace
}  // namespace moetune::text
