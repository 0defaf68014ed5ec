// The data and training recipe keys as a user meets them: --print-recipe shows their defaults, and a run reads
// lines in another spelling (data.columns / data.roles) from two sources mixed by weight (data.train_weights).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace moetune {
namespace {

TEST(FinetuneDataKeys, PrintRecipeShowsTheirDefaults) {
  const testing::RunResult result = testing::run_moetune("finetune --print-recipe --set training.aux_loss_coef=0.01");
  ASSERT_EQ(result.status, 0) << result.output;
  const nlohmann::json recipe = nlohmann::json::parse(result.output);
  EXPECT_EQ(recipe["training"]["aux_loss_coef"], 0.01);
  EXPECT_EQ(recipe["training"]["freeze"], nlohmann::json::array());
  for (const char* key : {"columns", "roles", "train_weights"}) EXPECT_EQ(recipe["data"][key], nlohmann::json::object()) << key;
}

TEST(FinetuneDataKeys, MappedColumnsFromWeightedSourcesTrain) {
  testing::ScratchDir dir;
  testing::write_file(dir / "chats.jsonl",
                      R"({"chat": [{"speaker": "human", "text": "Which is larger, 3 or 4?"}, {"speaker": "bot", "text": "4"}]})"
                      "\n"
                      R"({"chat": [{"speaker": "human", "text": "1 or 9?"}, {"speaker": "bot", "text": "9"}]})"
                      "\n");
  testing::write_file(dir / "more.jsonl", R"({"messages": [{"role": "user", "content": "2 or 5?"}, {"role": "assistant", "content": "5"}]})"
                                          "\n");
  const std::string chats = (dir / "chats.jsonl").string(), more = (dir / "more.jsonl").string();
  testing::write_file(dir / "recipe.yaml",
                      "model: " + (std::filesystem::path(MOETUNE_FIXTURES_DIR) / "../../assets/default/model").string() +
                          "\ndata:\n  train: [" + chats + ", " + more + "]\n  train_weights: {" + chats + ": 1, " + more +
                          ": 2}\n  columns: {messages: chat, role: speaker, content: text}\n  roles: {human: user, bot: assistant}\n"
                          "  max_length: 64\ntraining:\n  max_steps: 2\n  micro_batch_size: 1\n  device: cpu\noutput:\n  dir: " +
                          (dir / "run").string() + "\n");
  const testing::RunResult result = testing::run_moetune("finetune -c " + (dir / "recipe.yaml").string());
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("3 lines"), std::string::npos) << result.output;

  // Without the mapping the lines are of no known shape: the error names the file, the line and the keys.
  testing::write_file(dir / "bare.yaml", "model: " + (std::filesystem::path(MOETUNE_FIXTURES_DIR) / "../../assets/default/model").string() +
                                             "\ndata:\n  train: " + chats + "\ntraining:\n  device: cpu\noutput:\n  dir: " +
                                             (dir / "bare").string() + "\n");
  const testing::RunResult bare = testing::run_moetune("finetune -c " + (dir / "bare.yaml").string());
  EXPECT_NE(bare.status, 0);
  EXPECT_NE(bare.output.find(chats + ": line 1"), std::string::npos) << bare.output;
  EXPECT_NE(bare.output.find("\"chat\""), std::string::npos) << bare.output;
}

}  // namespace
}  // namespace moetune
