// Issue 16, items 4, 7, 13, 17 and 18 through the moetune program: each bad argument is a clean error that
// names it, and convert leaves a user's own files alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include "moetune/cli/sizes.h"
#include "moetune/core/error.h"
#include "test_util.h"

namespace moetune {
namespace {

namespace fs = std::filesystem;

const fs::path kDefaultModel = fs::path(MOETUNE_FIXTURES_DIR) / ".." / ".." / "assets" / "default" / "model";

// The program fails (exit 1, or CLI11's own status for its checks) with `expected` in its output.
void expect_refused(const std::string& arguments, const std::string& expected) {
  const testing::RunResult result = testing::run_moetune(arguments);
  EXPECT_NE(result.status, 0) << arguments;
  EXPECT_EQ(result.output.find("internal error"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find(expected), std::string::npos) << arguments << ": " << result.output;
}

// Runs the test body in `folder`: relative paths the program uses land there.
class WorkingDirectory {
 public:
  explicit WorkingDirectory(const fs::path& folder) : previous_(fs::current_path()) { fs::current_path(folder); }
  ~WorkingDirectory() { fs::current_path(previous_); }

 private:
  fs::path previous_;
};

TEST(HostileCli, OverrideWithAnEmptyKeyIsAnErrorNotAnEndlessLoop) {
  expect_refused("finetune --set .lr=3", "the key path '.lr' has an empty part");
}

TEST(HostileCli, RecipeWithoutAModelDoesNotReadTheWorkingDirectory) {
  testing::ScratchDir dir;
  testing::write_file(dir / "config.json", "{not json");  // what a stray ./config.json would give
  testing::write_file(dir / "recipe.yaml", "data:\n  train: x.jsonl\n");
  WorkingDirectory here(dir.path());
  expect_refused("finetune -c recipe.yaml", "the recipe names no model");
}

TEST(HostileCli, ResumingTheEmbeddedDefaultWithoutAnEarlierRunIsNamed) {
  testing::ScratchDir dir;
  WorkingDirectory here(dir.path());
  expect_refused("finetune --resume", "moetune-default-run: --resume, but there is no earlier run");
}

TEST(HostileCli, ResumingTheEmbeddedDefaultPicksTheNewestEarlierRun) {
  testing::ScratchDir dir;
  for (const char* run : {"20260101-000000", "20260102-000000"}) fs::create_directories(dir / "moetune-default-run" / run);
  WorkingDirectory here(dir.path());
  expect_refused("finetune --resume", "moetune-default-run/20260102-000000: --resume, but there is no checkpoint-* folder");
}

TEST(HostileCli, GenerateOptionsOutOfRangeAreNamed) {
  const std::string model = kDefaultModel.string();
  expect_refused("generate " + model + " --prompt hi --temperature nan", "--temperature nan");
  expect_refused("generate " + model + " --prompt hi --max-new-tokens -5", "--max-new-tokens -5");
  expect_refused("generate " + model + " --prompt hi --top-p 0", "--top-p");
}

TEST(HostileCli, InspectTokensAndShardSizesOutOfRangeAreNamed) {
  expect_refused("inspect " + kDefaultModel.string() + " --tokens -5", "--tokens");
  expect_refused("inspect " + kDefaultModel.string() + " --tokens 99999999999999999999", "--tokens");
  EXPECT_THROW(cli::parse_size("99999999999999999999GB", "--max-shard-size"), Error);
  EXPECT_THROW(cli::parse_size("1e300", "--max-shard-size"), Error);
}

TEST(HostileCli, ConvertRemovesOnlyItsOwnStaleShards) {
  testing::ScratchDir out;
  for (const char* name : {"model_v1_backup.safetensors", "model-lora-adapter.safetensors", "model-00001-of-00009.safetensors"})
    testing::write_file(out / name, "user bytes");
  const testing::RunResult result =
      testing::run_moetune("convert " + testing::fixture("qwen3_tiny").string() + " " + out.path().string());
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_EQ(testing::read_file(out / "model_v1_backup.safetensors"), "user bytes");
  EXPECT_EQ(testing::read_file(out / "model-lora-adapter.safetensors"), "user bytes");
  EXPECT_FALSE(fs::exists(out / "model-00001-of-00009.safetensors"));  // a stale shard of a name convert writes
  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
}

TEST(HostileCli, FifoAsTheDataFileIsRefusedWithoutBlocking) {
  testing::ScratchDir dir;
  ASSERT_EQ(::mkfifo((dir / "data.jsonl").c_str(), 0600), 0);
  expect_refused("eval " + kDefaultModel.string() + " --data " + (dir / "data.jsonl").string() + " --device cpu",
                 "data.jsonl: cannot open the data file: it is a FIFO");
}

}  // namespace
}  // namespace moetune
