#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/data/loader.h"
#include "moetune/data/step_reader.h"
#include "test_util.h"

namespace moetune::data {
namespace {

using json = Json;

// One token per byte, with a fake chat template, so expectations can be written by hand.
TextCodec byte_codec() {
  TextCodec codec;
  codec.encode = [](std::string_view text) { return std::vector<int64_t>(text.begin(), text.end()); };
  codec.eos_id = 1;
  codec.vocab_size = 256;
  codec.render_chat = [](const json& messages, bool add_generation_prompt, const json&) {
    std::string out;
    for (const json& m : messages) out += "<" + m["role"].get<std::string>() + ">" + m["content"].get<std::string>() + "|";
    return add_generation_prompt ? out + "<assistant>" : out;
  };
  return codec;
}

std::string scored_text(const Example& e) {
  std::string out;
  for (size_t i = 0; i < e.ids.size(); ++i) out += e.scored[i] ? char(e.ids[i] == 1 ? '$' : e.ids[i]) : '.';
  return out;
}

TEST(Example, PromptCompletionScoresTheCompletionAndEos) {
  Example e = make_example(json::parse(R"({"prompt": "2+2=", "completion": "4"})"), Format::Auto, byte_codec(), false);
  EXPECT_EQ(scored_text(e), "....4$");
  e = make_example(json::parse(R"({"prompt": "2+2=", "completion": "4"})"), Format::Auto, byte_codec(), true);
  EXPECT_EQ(scored_text(e), "2+2=4$");
}

// A tokenizer whose post_processor puts a BOS (2) before a text and an EOS (1) after it (Llama-3 puts the BOS only):
// text and prompt + completion lines get them as transformers' tokenizer(text) gives them, and no second EOS.
TEST(Example, TextGetsThePostProcessorsSpecialTokens) {
  TextCodec codec = byte_codec();
  codec.prefix_ids = {2};
  codec.suffix_ids = {1};
  Example e = make_example(json::parse(R"({"text": "ab"})"), Format::Auto, codec, false);
  EXPECT_EQ(e.ids, (std::vector<int64_t>{2, 'a', 'b', 1}));
  e = make_example(json::parse(R"({"prompt": "2+2=", "completion": "4"})"), Format::Auto, codec, false);
  EXPECT_EQ(e.ids, (std::vector<int64_t>{2, '2', '+', '2', '=', '4', 1}));
  EXPECT_EQ(scored_text(e), ".....4$");
}

TEST(Example, MessagesScoreAssistantTurnsOnly) {
  const json line = json::parse(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                                                 {"role": "user", "content": "ok"}, {"role": "assistant", "content": "k"}]})");
  Example e = make_example(line, Format::Messages, byte_codec(), false);
  EXPECT_EQ(scored_text(e), std::string(20, '.') + "yo|" + std::string(20, '.') + "k|");
}

TEST(Example, BadLinesSayWhy) {
  auto error = [](const std::string& text, Format format = Format::Auto) {
    try {
      make_example(json::parse(text), format, byte_codec(), false);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(R"({"title": "x"})").find("its keys are \"title\""), std::string::npos);
  EXPECT_NE(error(R"({"text": 5})").find("\"text\" must be a string"), std::string::npos);
  EXPECT_NE(error(R"({"input_ids": [1, 300]})").find("token id 300"), std::string::npos);
  EXPECT_NE(error(R"({"input_ids": [7]})").find("fewer than two tokens"), std::string::npos);
  EXPECT_NE(error(R"({"messages": []})").find("non-empty list"), std::string::npos);
  EXPECT_NE(error(R"({"prompt": "a"})", Format::PromptCompletion).find("missing \"completion\""), std::string::npos);
}

class Loader : public ::testing::Test {
 protected:
  std::filesystem::path write(const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& line : lines) text += line + "\n";
    testing::write_file(dir_ / "data.jsonl", text);
    return dir_ / "data.jsonl";
  }
  DataLoader loader(const std::filesystem::path& file, LoaderOptions options) {
    return DataLoader({file}, index_lines({file}, 0.0, 1).train, byte_codec(), options);
  }
  testing::ScratchDir dir_;
};

std::vector<int64_t> row(const MicroBatch& b, const Tensor& t, int64_t r) {
  const int64_t width = b.input_ids.size(1);
  return std::vector<int64_t>(t.data<int64_t>() + r * width, t.data<int64_t>() + (r + 1) * width);
}

TEST_F(Loader, PacksDocumentsWithRestartingPositionsAndNoCrossDocumentLabels) {
  auto file = write({R"({"input_ids": [10, 11, 12]})", R"({"input_ids": [20, 21]})", R"({"input_ids": [30, 31, 32, 33]})"});
  LoaderOptions options{.max_length = 6, .packing = true, .shuffle = false, .micro_batch_size = 2};
  DataLoader data = loader(file, options);
  MicroBatch b = data.next();
  ASSERT_EQ(b.input_ids.shape(), Shape({2, 5}));
  EXPECT_EQ(row(b, b.input_ids, 0), (std::vector<int64_t>{10, 11, 12, 20, 21}));
  EXPECT_EQ(row(b, b.position_ids, 0), (std::vector<int64_t>{0, 1, 2, 0, 1}));
  EXPECT_EQ(row(b, b.labels, 0), (std::vector<int64_t>{-100, 11, 12, -100, 21}));
  EXPECT_EQ(row(b, b.input_ids, 1), (std::vector<int64_t>{30, 31, 32, 33, 0}));
  EXPECT_EQ(row(b, b.attention_mask, 1), (std::vector<int64_t>{1, 1, 1, 1, 0}));
  EXPECT_EQ(row(b, b.labels, 1), (std::vector<int64_t>{-100, 31, 32, 33, -100}));
  EXPECT_EQ(b.tokens, 9);
  EXPECT_EQ(b.scored, 6);
}

TEST_F(Loader, TruncatesAndPadsWithoutPacking) {
  auto file = write({R"({"input_ids": [1, 2, 3, 4, 5, 6, 7, 8]})", R"({"input_ids": [9, 10]})"});
  DataLoader data = loader(file, {.max_length = 4, .packing = false, .shuffle = false, .micro_batch_size = 2});
  MicroBatch b = data.next();
  EXPECT_EQ(row(b, b.input_ids, 0), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(row(b, b.input_ids, 1), (std::vector<int64_t>{9, 10, 0, 0}));
}

TEST_F(Loader, ResumingFromAPositionGivesTheSameBatches) {
  std::vector<std::string> lines;
  for (int i = 0; i < 13; ++i) lines.push_back(fmt::format(R"({{"input_ids": [{}, {}, {}]}})", i + 2, i + 3, i + 4));
  auto file = write(lines);
  LoaderOptions options{.max_length = 7, .micro_batch_size = 2, .seed = 99};
  DataLoader first = loader(file, options);
  for (int i = 0; i < 5; ++i) first.next();
  const DataPosition saved = first.position();
  DataLoader resumed = loader(file, options);
  resumed.restore(saved);
  for (int i = 0; i < 6; ++i)  // across the epoch boundary too
    EXPECT_TRUE(first.next().input_ids.same_bytes(resumed.next().input_ids)) << i;
  EXPECT_GT(first.epochs_done(), 1.0);
}

// The trainer reads each step's micro-batches ahead on a thread: the same batches as reading them in turn, and the
// position a checkpoint records is the one after the steps taken, never after a read-ahead.
TEST_F(Loader, StepsReadAheadAreTheStepsReadInTurnAndThePositionIsTheTakenOnes) {
  std::vector<std::string> lines;
  for (int i = 0; i < 13; ++i) lines.push_back(fmt::format(R"({{"input_ids": [{}, {}, {}]}})", i + 2, i + 3, i + 4));
  auto file = write(lines);
  LoaderOptions options{.max_length = 7, .micro_batch_size = 2, .seed = 99};
  DataLoader in_turn = loader(file, options), ahead_loader = loader(file, options);
  StepReader ahead(ahead_loader, 3);
  for (int step = 0; step < 5; ++step) {  // 15 micro-batches of 13 lines: across epoch boundaries
    const std::vector<MicroBatch> got = ahead.take();
    ahead.read_ahead();
    ASSERT_EQ(got.size(), 3u);
    for (const MicroBatch& b : got) EXPECT_TRUE(b.input_ids.same_bytes(in_turn.next().input_ids)) << step;
    EXPECT_EQ(ahead.position().epoch, in_turn.position().epoch) << step;
    EXPECT_EQ(ahead.position().cursor, in_turn.position().cursor) << step;
    EXPECT_DOUBLE_EQ(ahead.epochs_done(), in_turn.epochs_done()) << step;
  }
  // Resuming drops what was read ahead: the next step starts at the restored position.
  DataLoader reference = loader(file, options);
  for (int i = 0; i < 4; ++i) reference.next();
  const DataPosition saved = reference.position();
  ahead.restore(saved, 0);
  EXPECT_EQ(ahead.position().cursor, saved.cursor);
  const std::vector<MicroBatch> after = ahead.take();
  for (const MicroBatch& b : after) EXPECT_TRUE(b.input_ids.same_bytes(reference.next().input_ids));
}

// A bad line met by a read-ahead is the error of the step that needs it, thrown when that step is taken.
TEST_F(Loader, AReadAheadsBadLineIsThrownWhenItsStepIsTaken) {
  auto file = write({R"({"input_ids": [2, 3]})", R"({"input_ids": [4, 5]})", "{not json", R"({"input_ids": [6, 7]})"});
  DataLoader data = loader(file, {.packing = false, .shuffle = false, .micro_batch_size = 1});
  StepReader steps(data, 2);
  EXPECT_EQ(steps.take().size(), 2u);
  steps.read_ahead();
  steps.wait();
  EXPECT_EQ(steps.position().cursor, 2);  // the failed read-ahead moved nothing a checkpoint would record
  try {
    steps.take();
    FAIL() << "expected the bad line's error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3: not JSON"), std::string::npos) << e.what();
  }
}

TEST_F(Loader, ShuffleIsSeededAndChangesPerEpoch) {
  std::vector<std::string> lines;
  for (int i = 0; i < 20; ++i) lines.push_back(fmt::format(R"({{"input_ids": [{}, {}]}})", i + 2, i + 2));
  auto file = write(lines);
  LoaderOptions options{.max_length = 2, .packing = false, .micro_batch_size = 20, .seed = 5};
  DataLoader a = loader(file, options), b = loader(file, options);
  const MicroBatch epoch0 = a.next(), epoch1 = a.next();
  EXPECT_TRUE(epoch0.input_ids.same_bytes(b.next().input_ids));
  EXPECT_FALSE(epoch0.input_ids.same_bytes(epoch1.input_ids));
}

TEST_F(Loader, BadLinesAreErrorsWithFileAndLineOrSkippedAndCounted) {
  auto file = write({R"({"input_ids": [2, 3]})", "", "{not json", R"({"input_ids": [4, 5]})"});
  try {
    loader(file, {.shuffle = false, .micro_batch_size = 4}).next();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data.jsonl: line 3: not JSON"), std::string::npos) << e.what();
  }
  DataLoader skipping = loader(file, {.shuffle = false, .skip_bad_lines = true, .micro_batch_size = 1});
  skipping.next();
  skipping.next();
  EXPECT_EQ(skipping.skipped_lines(), 1);
  auto all_bad = write({"{", "["});
  EXPECT_THROW(loader(all_bad, {.skip_bad_lines = true}).next(), Error);
}

TEST_F(Loader, SinglePassEndsWithAnEmptyBatch) {
  auto file = write({R"({"input_ids": [2, 3]})", R"({"input_ids": [4, 5]})", R"({"input_ids": [6, 7]})"});
  DataLoader data = loader(file, {.packing = false, .shuffle = false, .micro_batch_size = 2});
  EXPECT_EQ(data.next(true).input_ids.size(0), 2);
  EXPECT_EQ(data.next(true).input_ids.size(0), 1);
  EXPECT_FALSE(data.next(true).input_ids.defined());
}

TEST_F(Loader, ValidationFractionSplitsDeterministically) {
  std::vector<std::string> lines(200, R"({"input_ids": [2, 3]})");
  auto file = write(lines);
  SplitLines a = index_lines({file}, 0.25, 7), b = index_lines({file}, 0.25, 7);
  EXPECT_EQ(a.train.size() + a.validation.size(), 200u);
  EXPECT_NEAR(double(a.validation.size()), 50.0, 20.0);
  ASSERT_EQ(a.validation.size(), b.validation.size());
  for (size_t i = 0; i < a.validation.size(); ++i) EXPECT_EQ(a.validation[i].line_number, b.validation[i].line_number);
}

}  // namespace
}  // namespace moetune::data
