// Seeded mutation fuzzing (fuzz_util.h, with nesting and size mutations) of the parsers issue 16 found crashing:
// tokenizer.json, chat templates, recipes and data lines. Each input parses (and, for a template, renders) or
// fails with moetune::Error; the safetensors and config.json targets are in tests/io/test_fuzz.cpp.
#include <gtest/gtest.h>

#include "fuzz_util.h"
#include "moetune/core/error.h"
#include "moetune/data/example.h"
#include "moetune/io/json_file.h"
#include "moetune/text/jinja_template.h"
#include "moetune/text/tokenizer.h"
#include "moetune/train/recipe.h"
#include "test_util.h"

namespace moetune {
namespace {

// Runs `parse` on `iterations` mutations of `seeds`; prints how many parsed.
template <typename Parse>
void fuzz(const char* target, const std::vector<std::string>& seeds, int iterations, uint32_t salt, Parse&& parse) {
  std::mt19937 rng(testing::fuzz_seed() + salt);
  int parsed = 0;
  for (int i = 0; i < iterations; ++i) {
    const std::string input = testing::mutate(seeds[size_t(i) % seeds.size()], rng);
    try {
      parse(input);
      ++parsed;
    } catch (const Error&) {
    }
  }
  std::printf("%s fuzz: seed %u, %d inputs, %d parsed\n", target, testing::fuzz_seed(), iterations, parsed);
}

TEST(HostileFuzz, TokenizerJsonNeverCrashes) {
  std::vector<std::string> seeds;
  for (const char* name : {"gpt2_style", "qwen_style"})
    seeds.push_back(testing::read_file(testing::fixture("tokenizers") / name / "tokenizer.json"));
  fuzz("tokenizer.json", seeds, testing::fuzz_iterations(300), 2, [](const std::string& input) {
    text::Tokenizer::from_json_text(input, "fuzz.json").encode("Hello, world! 123");
  });
}

TEST(HostileFuzz, ChatTemplatesNeverCrash) {
  const std::vector<std::string> seeds = {
      testing::read_file(testing::fixture("chat_templates") / "qwen3" / "chat_template.jinja"),
      "{% for m in messages %}{{ m.role ~ ': ' ~ m.content|trim }}{% if not loop.last %}\n{% endif %}{% endfor %}",
      "{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i ** 2 %}{% endfor %}{{ ns.n * 'ab' }}"};
  const auto messages = text::jinja::Value::json(nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])"));
  fuzz("chat template", seeds, testing::fuzz_iterations(1500), 3, [&](const std::string& input) {
    text::jinja::Template(input, "fuzz.jinja").render({{"messages", messages}}, text::jinja::kMaxRenderWork / 100);
  });
}

TEST(HostileFuzz, RecipesNeverCrash) {
  const std::vector<std::string> seeds = {
      testing::read_file(std::filesystem::path(MOETUNE_FIXTURES_DIR) / ".." / ".." / "examples" / "tiny-default.yaml"),
      "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\noptimizer: {lr: 1.0e-3}\n"};
  fuzz("recipe", seeds, testing::fuzz_iterations(1500), 4,
       [](const std::string& input) { train::parse_recipe(input, "fuzz.yaml"); });
}

TEST(HostileFuzz, DataLinesNeverCrash) {
  const std::vector<std::string> seeds = {
      R"({"input_ids": [1, 2, 3]})", R"({"prompt": "2+2=", "completion": "4"})", R"({"text": "hello"})",
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})"};
  data::TextCodec codec;
  codec.encode = [](std::string_view text) { return std::vector<int64_t>(text.begin(), text.end()); };
  codec.render_chat = [](const data::Json& messages, bool, const data::Json&) { return messages.dump(); };
  codec.vocab_size = 256;
  fuzz("data line", seeds, testing::fuzz_iterations(3000), 5, [&](const std::string& input) {
    data::make_example(io::parse_json_text<data::Json>(input, ""), data::Format::Auto, codec, false);
  });
}

}  // namespace
}  // namespace moetune
