// `cmake --install` as a user runs it: the installed moetune works from any folder, finds the embedded default's
// assets where it was installed (not in the source tree it was built from), and the C++ API's headers and library
// are there.
#include <gtest/gtest.h>

#include "test_util.h"

namespace moetune {
namespace {

namespace fs = std::filesystem;

TEST(Install, InstalledMoetuneRunsFromAnotherFolder) {
  testing::ScratchDir dir;
  const fs::path prefix = dir / "prefix";
  const testing::RunResult installed = testing::run_shell(std::string(MOETUNE_CMAKE_COMMAND) + " --install " +
                                                          MOETUNE_BUILD_DIR + " --prefix " + prefix.string());
  ASSERT_EQ(installed.status, 0) << installed.output;
  const fs::path assets = prefix / "share" / "moetune" / "assets" / "default";
  for (const fs::path& file : {prefix / "bin" / "moetune", prefix / "include" / "moetune" / "moetune.h",
                               prefix / "include" / "moetune" / "model" / "causal_lm.h", assets / "model" / "config.json",
                               assets / "train.jsonl", assets / "test.jsonl"})
    EXPECT_TRUE(fs::exists(file)) << file;
  bool library = false;
  for (const auto& item : fs::recursive_directory_iterator(prefix))
    library |= item.path().filename() == "libmoetune_engine.a";
  EXPECT_TRUE(library);

  fs::create_directories(dir / "elsewhere");
  const std::string moetune = "cd " + (dir / "elsewhere").string() + " && env -u MOETUNE_ASSETS_DIR " +
                              (prefix / "bin" / "moetune").string();
  const testing::RunResult recipe = testing::run_shell(moetune + " finetune --print-recipe");
  ASSERT_EQ(recipe.status, 0) << recipe.output;
  EXPECT_NE(recipe.output.find("\"optimizer\""), std::string::npos) << recipe.output;

  // The demo, cut short: it trains the installed copy of the bundled model and writes its run under this folder.
  const testing::RunResult demo =
      testing::run_shell(moetune + " finetune --set training.max_steps=2 --set training.device=cpu");
  ASSERT_EQ(demo.status, 0) << demo.output;
  EXPECT_NE(demo.output.find("(embedded default): " + (assets / "model").string()), std::string::npos) << demo.output;
  EXPECT_NE(demo.output.find("held-out accuracy after 2 steps"), std::string::npos) << demo.output;
  EXPECT_TRUE(fs::is_directory(dir / "elsewhere" / "moetune-default-run")) << demo.output;
}

}  // namespace
}  // namespace moetune
