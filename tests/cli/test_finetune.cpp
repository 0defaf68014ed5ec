// `moetune finetune` with no recipe: the embedded default teaches the bundled tiny MoE its task, measured on
// held-out questions before and after (the README's main command runs the same with 300 steps).
#include <gtest/gtest.h>

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

TEST(Finetune, BadRecipeIsACleanError) {
  testing::ScratchDir dir;
  testing::write_file(dir / "recipe.yaml", "optimizer:\n  lrr: 1\n");
  testing::RunResult result = testing::run_moetune("finetune -c " + (dir / "recipe.yaml").string());
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.output.find("unknown key 'optimizer.lrr'"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace moetune
