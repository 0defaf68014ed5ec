// `moetune eval` run as a user runs it: the loss is the token-weighted mean cross-entropy over the tokens training
// scores, each line scored alone; any data shape training reads; every kind of bad data is a clean error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "moetune/model/causal_lm.h"
#include "moetune/ops/loss.h"
#include "test_util.h"

namespace moetune {
namespace {

namespace fs = std::filesystem;

testing::RunResult run_eval(const std::filesystem::path& data, const std::string& flags = "") {
  // The CPU engine, compared below with the CPU reference; tests/gpu/test_eval_gpu.cpp covers --device cuda.
  return testing::run_moetune("eval " + testing::fixture("llama_tiny").string() + " --data " + data.string() +
                              " --device cpu " + flags);
}

// Sequences of different lengths, so a mean of per-line means would differ from the token-weighted mean.
const std::vector<std::vector<int64_t>> kSequences = {
    {3, 17, 42, 5, 88, 9, 61, 0, 95, 12, 30}, {7, 7}, {50, 1, 2, 64, 33}};

TEST(Eval, LossIsTheTokenWeightedMeanOfEachLineScoredAlone) {
  testing::ScratchDir dir;
  std::string jsonl;
  for (const auto& ids : kSequences) jsonl += nlohmann::json{{"input_ids", ids}, {"source", "test"}}.dump() + "\n";
  testing::write_file(dir / "data.jsonl", jsonl);
  testing::RunResult result = run_eval(dir / "data.jsonl", "--json");
  ASSERT_EQ(result.status, 0) << result.output;
  const auto report = nlohmann::json::parse(result.output);

  model::CausalLM model = model::CausalLM::from_pretrained(testing::fixture("llama_tiny"));
  double loss_sum = 0;
  int64_t tokens = 0;
  for (const auto& ids : kSequences) {
    const int64_t length = int64_t(ids.size());
    const Tensor input_ids = Tensor::from_vector(ids, {1, length});
    const ops::CrossEntropy scored =
        ops::cross_entropy(model.forward(input_ids).view({length, -1}), ops::shift_labels(input_ids));
    loss_sum += scored.loss_sum;
    tokens += scored.count;
  }
  EXPECT_EQ(tokens, 10 + 1 + 4);
  EXPECT_EQ(report["tokens"].get<int64_t>(), tokens);
  EXPECT_EQ(report["sequences"].get<int64_t>(), 3);
  const double expected_loss = loss_sum / double(tokens);
  EXPECT_NEAR(report["loss"].get<double>(), expected_loss, 1e-9 * expected_loss);
  EXPECT_NEAR(report["perplexity"].get<double>(), std::exp(expected_loss), 1e-9 * std::exp(expected_loss));
  std::printf("llama_tiny: loss %.9f over %lld tokens\n", expected_loss, static_cast<long long>(tokens));
}

TEST(Eval, TextReportNamesTheFileAndThePerplexity) {
  testing::ScratchDir dir;
  testing::write_file(dir / "data.jsonl", "{\"input_ids\": [1, 2, 3]}\n");
  testing::RunResult result = run_eval(dir / "data.jsonl");
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find((dir / "data.jsonl").string()), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("1 sequences, 2 tokens predicted"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("perplexity"), std::string::npos) << result.output;
}

// Evaluates `jsonl` and expects exit status 1 with "moetune: error: FILE: line N: " and `detail`.
void expect_line_error(const std::string& jsonl, int line, const std::string& detail) {
  testing::ScratchDir dir;
  testing::write_file(dir / "data.jsonl", jsonl);
  testing::RunResult result = run_eval(dir / "data.jsonl");
  EXPECT_EQ(result.status, 1) << result.output;
  const std::string where = (dir / "data.jsonl").string() + ": line " + std::to_string(line) + ": ";
  EXPECT_NE(result.output.find("moetune: error: " + where), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(detail), std::string::npos) << result.output;
}

// A good line and a blank one come first, so the line number must count both.
const std::string kGoodLines = "{\"input_ids\": [1, 2, 3]}\n\n";

TEST(Eval, MissingDataFileIsAnError) {
  testing::ScratchDir dir;
  testing::RunResult result = run_eval(dir / "absent.jsonl");
  EXPECT_EQ(result.status, 1) << result.output;
  EXPECT_NE(result.output.find("moetune: error: --data: " + (dir / "absent.jsonl").string() + " does not exist"),
            std::string::npos)
      << result.output;
}

TEST(Eval, FolderWithoutDataIsAnError) {
  testing::ScratchDir dir;
  testing::RunResult result = run_eval(dir.path());
  EXPECT_EQ(result.status, 1) << result.output;
  EXPECT_NE(result.output.find("moetune: error: --data: the folder " + dir.path().string() + " holds no *.jsonl"),
            std::string::npos)
      << result.output;
}

TEST(Eval, EmptyDataFileIsAnError) {
  for (const char* text : {"", "\n  \n\t\n"}) {
    testing::ScratchDir dir;
    testing::write_file(dir / "data.jsonl", text);
    testing::RunResult result = run_eval(dir / "data.jsonl");
    EXPECT_EQ(result.status, 1) << result.output;
    EXPECT_NE(result.output.find("moetune: error: " + (dir / "data.jsonl").string() + ": no examples"), std::string::npos)
        << result.output;
  }
}

TEST(Eval, LineThatIsNotJsonIsAnError) { expect_line_error(kGoodLines + "{\"input_ids\": [1, 2\n", 3, "not JSON"); }

TEST(Eval, LineThatIsNotAnObjectIsAnError) { expect_line_error(kGoodLines + "[1, 2, 3]\n", 3, "not a JSON object"); }

TEST(Eval, LineOfNoKnownShapeIsAnError) {
  expect_line_error(kGoodLines + "{\"ids\": [1, 2]}\n", 3, "a line of no known shape: its keys are");
}

TEST(Eval, InputIdsThatAreNotIntegersAreAnError) {
  expect_line_error(kGoodLines + "{\"input_ids\": \"1 2\"}\n", 3, "\"input_ids\" must be a list of token ids");
  expect_line_error(kGoodLines + "{\"input_ids\": [1, 2.5]}\n", 3, "\"input_ids\" must hold integers, got 2.5");
}

TEST(Eval, TokenIdOutsideTheVocabularyIsAnError) {
  // llama_tiny's vocabulary is 96 tokens.
  expect_line_error(kGoodLines + "{\"input_ids\": [1, 2, 96]}\n", 3,
                    "token id 96 at index 2 is outside the vocabulary [0, 96)");
  expect_line_error(kGoodLines + "{\"input_ids\": [-5, 2]}\n", 3,
                    "token id -5 at index 0 is outside the vocabulary [0, 96)");
}

TEST(Eval, LineWithFewerThanTwoTokensIsAnError) {
  expect_line_error(kGoodLines + "{\"input_ids\": [4]}\n", 3, "fewer than two tokens");
  expect_line_error(kGoodLines + "{\"input_ids\": []}\n", 3, "fewer than two tokens");
}

// Chat data as training reads it: the bundled chat model scores the assistant turns only, whatever the line's
// shape (a ShareGPT or Alpaca line scores as its messages line does), from a folder and from .gz alike.
TEST(Eval, ChatShapesScoreTheTokensTrainingScores) {
  testing::ScratchDir dir;
  const std::string chat_model = (testing::fixture("..") / ".." / "assets" / "default" / "model").string();
  auto eval_report = [&](const std::string& data, const std::string& flags = "") {
    const testing::RunResult result =
        testing::run_moetune("eval " + chat_model + " --data " + data + " --device cpu --json " + flags);
    EXPECT_EQ(result.status, 0) << result.output;
    return result.status == 0 ? nlohmann::json::parse(result.output) : nlohmann::json::object();
  };
  const std::string messages =
      R"({"messages": [{"role": "user", "content": "Which is larger, 47 or 52?"}, {"role": "assistant", "content": "52"}]})";
  const std::string sharegpt =
      R"({"conversations": [{"from": "human", "value": "Which is larger, 47 or 52?"}, {"from": "gpt", "value": "52"}]})";
  const std::string alpaca = R"({"instruction": "Which is larger, 47 or 52?", "output": "52"})";
  testing::write_file(dir / "messages.jsonl", messages + "\n");
  testing::write_file(dir / "sharegpt.jsonl", sharegpt + "\n");
  testing::write_file(dir / "alpaca.jsonl", alpaca + "\n");
  const nlohmann::json reference = eval_report((dir / "messages.jsonl").string());
  ASSERT_TRUE(reference.contains("loss"));
  // The answer and the end of the turn, not the question: a handful of tokens.
  EXPECT_GT(reference["tokens"].get<int64_t>(), 0);
  EXPECT_LT(reference["tokens"].get<int64_t>(), 8);
  for (const char* shape : {"sharegpt.jsonl", "alpaca.jsonl"}) {
    const nlohmann::json report = eval_report((dir / shape).string());
    EXPECT_EQ(report.value("tokens", int64_t(-1)), reference["tokens"].get<int64_t>()) << shape;
    EXPECT_DOUBLE_EQ(report.value("loss", -1.0), reference["loss"].get<double>()) << shape;
  }
  // Three files through a glob: three sequences, each scored alike.
  const nlohmann::json all = eval_report("'" + (dir / "*.jsonl").string() + "'");
  EXPECT_EQ(all.value("sequences", int64_t(-1)), 3);
  EXPECT_NEAR(all.value("loss", -1.0), reference["loss"].get<double>(), 1e-12);
  // A folder holding a .gz file.
  fs::create_directories(dir / "zipped");
  testing::write_file(dir / "zipped" / "data.jsonl", messages + "\n");
  ASSERT_EQ(std::system(("gzip " + (dir / "zipped" / "data.jsonl").string()).c_str()), 0);
  EXPECT_DOUBLE_EQ(eval_report((dir / "zipped").string()).value("loss", -1.0), reference["loss"].get<double>());
  // --format forces a shape: the messages line read as token ids has none.
  const testing::RunResult forced = testing::run_moetune("eval " + chat_model + " --data " +
                                                         (dir / "messages.jsonl").string() + " --device cpu --format input_ids");
  EXPECT_EQ(forced.status, 1) << forced.output;
  EXPECT_NE(forced.output.find("\"input_ids\" must be a list of token ids"), std::string::npos) << forced.output;
}

// A data set that spells messages its own way reads through the recipe's data.columns / data.roles as training
// reads it (the same loader options, train/recipe_data.h): the same tokens and loss as the messages line, --data
// defaulting to data.validation, --set overriding a data key; without the mapping the line is an error naming
// the keys it has.
TEST(Eval, TheRecipesColumnAndRoleMappingReadsLinesAsTrainingDoes) {
  testing::ScratchDir dir;
  const std::string chat_model = (testing::fixture("..") / ".." / "assets" / "default" / "model").string();
  auto eval_report = [&](const std::string& flags) {
    const testing::RunResult result = testing::run_moetune("eval " + chat_model + " --device cpu --json " + flags);
    EXPECT_EQ(result.status, 0) << result.output;
    return result.status == 0 ? nlohmann::json::parse(result.output) : nlohmann::json::object();
  };
  testing::write_file(dir / "messages.jsonl",
                      R"({"messages": [{"role": "user", "content": "Which is larger, 47 or 52?"}, {"role": "assistant", "content": "52"}]})"
                      "\n");
  testing::write_file(dir / "custom.jsonl",
                      R"({"chat": [{"speaker": "human", "text": "Which is larger, 47 or 52?"}, {"speaker": "bot", "text": "52"}]})"
                      "\n");
  testing::write_file(dir / "recipe.yaml", "data:\n  validation: [" + (dir / "custom.jsonl").string() +
                                               "]\n  columns: {messages: chat, role: speaker, content: text}\n"
                                               "  roles: {human: user, bot: assistant}\n");
  const nlohmann::json reference = eval_report("--data " + (dir / "messages.jsonl").string());
  ASSERT_TRUE(reference.contains("loss"));
  const nlohmann::json mapped = eval_report("-c " + (dir / "recipe.yaml").string());
  EXPECT_EQ(mapped.value("data", std::string()), (dir / "custom.jsonl").string());
  EXPECT_EQ(mapped.value("tokens", int64_t(-1)), reference["tokens"].get<int64_t>());
  EXPECT_DOUBLE_EQ(mapped.value("loss", -1.0), reference["loss"].get<double>());
  // --set reaches the data section: with the prompt scored too, more tokens count.
  const nlohmann::json with_prompt = eval_report("-c " + (dir / "recipe.yaml").string() + " --set data.loss_on_prompt=true");
  EXPECT_GT(with_prompt.value("tokens", int64_t(-1)), reference["tokens"].get<int64_t>());

  const testing::RunResult unmapped =
      testing::run_moetune("eval " + chat_model + " --device cpu --data " + (dir / "custom.jsonl").string());
  EXPECT_EQ(unmapped.status, 1) << unmapped.output;
  EXPECT_NE(unmapped.output.find("chat"), std::string::npos) << unmapped.output;
  const testing::RunResult no_data = testing::run_moetune("eval " + chat_model + " --device cpu");
  EXPECT_EQ(no_data.status, 1) << no_data.output;
  EXPECT_NE(no_data.output.find("data.validation"), std::string::npos) << no_data.output;
}

}  // namespace
}  // namespace moetune
