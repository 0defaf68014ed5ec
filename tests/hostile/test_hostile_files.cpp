// Issue 16, items 2, 10 and 20: JSON nested 100,000 deep, FIFOs and devices where files are expected, and
// tokenizers with very many added tokens are clean errors or fast, never a crash or a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "moetune/core/error.h"
#include "moetune/data/loader.h"
#include "moetune/io/atomic_file.h"
#include "moetune/io/json_file.h"
#include "moetune/io/regular_file.h"
#include "moetune/io/safetensors.h"
#include "moetune/text/tokenizer.h"
#include "test_util.h"

namespace moetune {
namespace {

namespace fs = std::filesystem;

std::string deep_array(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// `body` throws an Error whose message holds every one of `parts`.
template <typename Body>
void expect_error(Body&& body, std::initializer_list<std::string> parts) {
  try {
    body();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(HostileJson, DeepNestingIsAnErrorNamingTheSourceAndDepth) {
  expect_error([] { io::parse_json_text("{\"a\": " + deep_array(100000) + "}", "config.json"); },
               {"config.json", "nested deeper than 1000 levels"});
  EXPECT_NO_THROW(io::parse_json_text(deep_array(1000), "ok.json"));
  // Brackets inside strings are text, not nesting.
  EXPECT_NO_THROW(io::parse_json_text("{\"s\": \"" + std::string(5000, '[') + "\\\"\"}", "strings.json"));
}

TEST(HostileJson, LongValuesAreAbbreviatedInMessages) {
  const std::string text = io::abbreviated_dump(nlohmann::json(std::string(1000000, 'x')));
  EXPECT_LT(text.size(), 200u);
  EXPECT_NE(text.find("1000002 characters"), std::string::npos) << text;
}

TEST(HostileJson, DeepDataLinesAreAnErrorNamingTheFileAndLine) {
  testing::ScratchDir dir;
  for (const std::string& line :
       {"{\"input_ids\": " + deep_array(50000) + "}", "{\"text\": \"hi\", \"extra\": " + deep_array(50000) + "}",
        "{\"messages\": [{\"role\": \"user\", \"content\": " + deep_array(50000) + "}]}"}) {
    testing::write_file(dir / "data.jsonl", "{\"input_ids\": [1, 2]}\n" + line + "\n");
    const std::vector<fs::path> files = {dir / "data.jsonl"};
    data::TextCodec codec;
    codec.encode = [](std::string_view text) { return std::vector<int64_t>(text.begin(), text.end()); };
    data::DataLoader loader(files, data::index_lines(files, 0, 0).train, codec, {.shuffle = false, .micro_batch_size = 1});
    loader.next();
    expect_error([&] { loader.next(); }, {"data.jsonl: line 2", "nested deeper than 1000 levels"});
  }
}

TEST(HostileJson, DeepTokenizerJsonIsAnErrorNamingTheFile) {
  testing::ScratchDir dir;
  const fs::path path = dir / "tokenizer.json";
  testing::write_file(path, "{\"normalizer\": " + deep_array(100000) + ", \"model\": {}}");
  expect_error([&] { text::Tokenizer::from_file(path); }, {path.string(), "nested deeper than 1000 levels"});
}

TEST(HostileFiles, FifosDevicesAndFoldersAreRefusedWithoutBlocking) {
  testing::ScratchDir dir;
  const fs::path fifo = dir / "data.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { data::index_lines({fifo}, 0, 0); }, {fifo.string(), "FIFO"});
  expect_error([&] { io::SafetensorsFile::open(fifo); }, {fifo.string(), "not a regular file"});
  expect_error([&] { text::Tokenizer::from_file(fifo); }, {fifo.string(), "FIFO"});
  expect_error([] { io::read_json_file("/dev/zero"); }, {"/dev/zero", "device"});
  fs::create_symlink("/dev/zero", dir / "tokenizer.json");  // a link is followed, to what it is
  expect_error([&] { text::Tokenizer::from_file(dir / "tokenizer.json"); }, {"tokenizer.json", "device"});
  expect_error([&] { io::read_json_file(dir.path()); }, {"folder"});
}

TEST(HostileFiles, AtomicCopyReplacesAPlantedLinkInsteadOfWritingThroughIt) {
  testing::ScratchDir dir;
  testing::write_file(dir / "source.json", std::string(3 << 20, 'x'));  // more than one buffer
  testing::write_file(dir / "victim.json", "keep me");
  fs::create_symlink(dir / "victim.json", dir / "copy.json");
  io::copy_file_atomically(dir / "source.json", dir / "copy.json");
  EXPECT_EQ(testing::read_file(dir / "victim.json"), "keep me");
  EXPECT_FALSE(fs::is_symlink(dir / "copy.json"));
  EXPECT_EQ(testing::read_file(dir / "copy.json"), std::string(3 << 20, 'x'));
  expect_error([&] { io::copy_file_atomically(dir / "absent.json", dir / "copy2.json"); }, {"absent.json", "does not exist"});
  EXPECT_FALSE(fs::exists(dir / "copy2.json"));
}

TEST(HostileFiles, ManyAddedTokensLoadFast) {
  nlohmann::json tokenizer =
      nlohmann::json::parse(testing::read_file(testing::fixture("tokenizers") / "gpt2_style" / "tokenizer.json"));
  const int first = int(tokenizer["model"]["vocab"].size());
  nlohmann::json& added = tokenizer["added_tokens"] = nlohmann::json::array();
  for (int i = 0; i < 40000; ++i)
    added.push_back({{"id", first + i}, {"content", "<tok" + std::to_string(i) + ">"}, {"special", true}});
  added.push_back({{"id", first}, {"content", "<tok0>"}, {"special", true}});  // a repeat keeps the first id
  const auto start = std::chrono::steady_clock::now();
  const text::Tokenizer loaded = text::Tokenizer::from_json_text(tokenizer.dump(), "many_added.json");
  // It took 16.6 s; a few hundred ms now, generous for the sanitizer build.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  EXPECT_EQ(loaded.token_to_id("<tok39999>"), first + 39999);
  EXPECT_EQ(loaded.token_to_id("<tok0>"), first);
  EXPECT_EQ(loaded.encode("a<tok123>b").size(), 3u);
}

}  // namespace
}  // namespace moetune
