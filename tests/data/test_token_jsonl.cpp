// The token-id JSONL reader: what it yields line by line, and the message for each kind of bad line.
#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/data/token_jsonl.h"
#include "test_util.h"

namespace moetune::data {
namespace {

constexpr int64_t kVocab = 96;

// The message of the Error that reading every line of `jsonl` throws, or "" when none is thrown.
std::string read_error(const std::string& jsonl) {
  testing::ScratchDir dir;
  testing::write_file(dir / "data.jsonl", jsonl);
  try {
    TokenJsonlReader reader(dir / "data.jsonl", kVocab);
    while (reader.next()) {
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& jsonl, const std::string& where, const std::string& what) {
  const std::string message = read_error(jsonl);
  EXPECT_NE(message.find("data.jsonl: " + where + ": "), std::string::npos) << message;
  EXPECT_NE(message.find(what), std::string::npos) << message;
}

TEST(TokenJsonl, YieldsEachLineWithItsNumberAndSkipsBlankOnes) {
  testing::ScratchDir dir;
  testing::write_file(dir / "data.jsonl",
                      "{\"input_ids\": [1, 2, 3]}\n"
                      "\n"
                      "  \t\r\n"
                      "{\"text\": \"ignored\", \"input_ids\": [95, 0], \"labels\": null}\r\n"
                      "{\"input_ids\":[7,8]}");  // the last line has no newline
  TokenJsonlReader reader(dir / "data.jsonl", kVocab);
  std::optional<TokenSequence> first = reader.next(), second = reader.next(), third = reader.next();
  ASSERT_TRUE(first && second && third);
  EXPECT_EQ(first->line_number, 1);
  EXPECT_EQ(first->input_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(second->line_number, 4);
  EXPECT_EQ(second->input_ids, (std::vector<int64_t>{95, 0}));
  EXPECT_EQ(third->line_number, 5);
  EXPECT_EQ(third->input_ids, (std::vector<int64_t>{7, 8}));
  EXPECT_FALSE(reader.next());
  EXPECT_FALSE(reader.next());
}

TEST(TokenJsonl, EmptyFileYieldsNothing) { EXPECT_EQ(read_error(""), ""); }

TEST(TokenJsonl, MissingFileOrFolderIsAnError) {
  testing::ScratchDir dir;
  EXPECT_THROW(TokenJsonlReader(dir / "absent.jsonl", kVocab), Error);
  EXPECT_THROW(TokenJsonlReader(dir.path(), kVocab), Error);  // a folder opens on Linux: refused before that
}

TEST(TokenJsonl, BadLinesNameTheFileAndLine) {
  const std::string good = "{\"input_ids\": [1, 2]}\n\n";  // lines 1 and 2, so the bad line is line 3
  expect_error(good + "{\"input_ids\": [1, 2", "line 3", "not JSON");
  expect_error(good + "[1, 2, 3]", "line 3", "expected an object");
  expect_error(good + "{\"ids\": [1, 2]}", "line 3", "no \"input_ids\"");
  expect_error(good + "{\"input_ids\": \"1 2\"}", "line 3", "must be an array of integers, got string");
  expect_error(good + "{\"input_ids\": [1, 2.5]}", "line 3", "\"input_ids\"[1] is 2.5, not an integer");
  expect_error(good + "{\"input_ids\": [1, true]}", "line 3", "\"input_ids\"[1] is true, not an integer");
  expect_error(good + "{\"input_ids\": [4]}", "line 3", "1 token(s), nothing to predict");
  expect_error(good + "{\"input_ids\": []}", "line 3", "0 token(s), nothing to predict");
}

TEST(TokenJsonl, IdsOutsideTheVocabularyAreErrors) {
  expect_error("{\"input_ids\": [1, 96]}", "line 1", "token id 96 at index 1 is outside the vocabulary [0, 96)");
  expect_error("{\"input_ids\": [-1, 5]}", "line 1", "token id -1 at index 0 is outside the vocabulary [0, 96)");
  // Past int64's range: rejected, and quoted as written.
  expect_error("{\"input_ids\": [3, 18446744073709551615]}", "line 1", "token id 18446744073709551615 at index 1");
}

}  // namespace
}  // namespace moetune::data
