// `moetune finetune` with no recipe: the embedded default teaches the bundled tiny MoE its task, measured on
// held-out questions before and after (the README's main command runs the same with 300 steps).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "test_util.h"

namespace moetune {
namespace {

double percent_after(const std::string& output, const std::string& label) {
  std::smatch match;
  if (!std::regex_search(output, match, std::regex(label + "[^:]*: ([0-9.]+)%"))) return -1;
  return std::stod(match[1]);
}

TEST(Finetune, EmbeddedDefaultLearnsItsTask) {
#if MOETUNE_SANITIZED
  GTEST_SKIP() << "a minute of training is too slow under the sanitizers; the release build runs this test";
#endif
  testing::ScratchDir dir;
  testing::RunResult result = testing::run_moetune("finetune --set training.max_steps=150 --set output.dir=" +
                                                   (dir / "run").string());
  ASSERT_EQ(result.status, 0) << result.output;
  const double before = percent_after(result.output, "held-out accuracy before");
  const double after = percent_after(result.output, "held-out accuracy after");
  std::printf("held-out accuracy %.1f%% -> %.1f%%\n", before, after);
  EXPECT_GE(after, before + 30.0) << result.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / "checkpoint-000150" / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / "metrics.jsonl"));
}

// `--set model=` and `--set data.train=` with no -c: the user's own job, not the embedded demo on their model.
TEST(Finetune, ModelAndDataSetWithoutARecipeRunTheUsersJobNotTheDemo) {
  testing::ScratchDir dir;
  testing::write_file(dir / "data.jsonl", "{\"input_ids\": [1, 2, 3, 4]}\n{\"input_ids\": [5, 6, 7]}\n");
  const std::string model = testing::fixture("qwen3_moe_tiny").string();
  testing::RunResult result = testing::run_moetune("finetune --set model=" + model + " --set data.train=" +
                                                   (dir / "data.jsonl").string() + " --set training.max_steps=1 --set data.max_length=16 --set training.micro_batch_size=1 " +
                                                   "--set training.device=cpu --set output.dir=" + (dir / "run").string());
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(result.output.find("embedded default"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("held-out accuracy"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("training " + model), std::string::npos) << result.output;
}

// A user's ShareGPT, Alpaca and TRL conversational lines in one file train the bundled chat model; the run reads
// every line before the first step, so each shape is turned into an example.
TEST(Finetune, ConversationShapesTrain) {
  testing::ScratchDir dir;
  testing::write_file(dir / "data.jsonl",
                      R"({"conversations": [{"from": "human", "value": "Which is larger, 3 or 4?"}, {"from": "gpt", "value": "4"}]})"
                      "\n"
                      R"({"instruction": "Which is larger?", "input": "5 or 2", "output": "5"})"
                      "\n"
                      R"({"prompt": [{"role": "user", "content": "1 or 9?"}], "completion": [{"role": "assistant", "content": "9"}]})"
                      "\n");
  testing::write_file(dir / "recipe.yaml", "model: " + (std::filesystem::path(MOETUNE_FIXTURES_DIR) / "../../assets/default/model").string() +
                                               "\ndata:\n  train: " + (dir / "data.jsonl").string() +
                                               "\n  max_length: 64\n  chat_template_kwargs: {enable_thinking: false}\ntraining:\n  max_steps: 1\n  micro_batch_size: 1\n"
                                               "  device: cpu\noutput:\n  dir: " + (dir / "run").string() + "\n");
  testing::RunResult result = testing::run_moetune("finetune -c " + (dir / "recipe.yaml").string());
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("3 lines"), std::string::npos) << result.output;
}

TEST(Finetune, PrintRecipeShowsTheMergedRecipeWithEveryDefault) {
  testing::ScratchDir dir;
  testing::write_file(dir / "recipe.yaml", "optimizer:\n  lr: 2.0e-5\n");
  testing::RunResult result =
      testing::run_moetune("finetune --print-recipe -c " + (dir / "recipe.yaml").string() + " --set training.max_steps=7");
  ASSERT_EQ(result.status, 0) << result.output;
  const nlohmann::json recipe = nlohmann::json::parse(result.output);
  EXPECT_EQ(recipe["optimizer"]["lr"], 2.0e-5);
  EXPECT_EQ(recipe["training"]["max_steps"], 7);
  EXPECT_EQ(recipe["schedule"]["type"], "cosine");  // a default
}

TEST(Finetune, BadRecipeIsACleanError) {
  testing::ScratchDir dir;
  testing::write_file(dir / "recipe.yaml", "optimizer:\n  lrr: 1\n");
  testing::RunResult result = testing::run_moetune("finetune -c " + (dir / "recipe.yaml").string());
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.output.find("unknown key 'optimizer.lrr'"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace moetune
