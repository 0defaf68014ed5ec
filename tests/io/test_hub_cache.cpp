// Hub ids found in a local Hugging Face cache laid out as huggingface_hub lays it out, and the error that says
// where moetune looked and how to download a model it does not find.
#include <gtest/gtest.h>

#include <cstdlib>

#include "moetune/core/error.h"
#include "moetune/io/hub_cache.h"
#include "test_util.h"

namespace moetune::io {
namespace {

namespace fs = std::filesystem;

class HubCache : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"HF_HUB_CACHE", "HF_HOME"})
      if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
    unsetenv("HF_HOME");
    setenv("HF_HUB_CACHE", (dir_ / "hub").c_str(), 1);
    repo_ = dir_ / "hub" / "models--Org--Tiny";
    testing::copy_folder(testing::fixture("qwen3_moe_tiny"), repo_ / "snapshots" / "c0ffee");
    std::filesystem::create_directories(repo_ / "refs");
    testing::write_file(repo_ / "refs" / "main", "c0ffee\n");
    testing::copy_folder(testing::fixture("qwen3_moe_tiny"), repo_ / "snapshots" / "0ld");
    testing::write_file(repo_ / "refs" / "v1", "0ld");
  }
  void TearDown() override {
    unsetenv("HF_HUB_CACHE");
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }
  std::string error(const std::string& name) {
    try {
      resolve_model_folder(name);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  testing::ScratchDir dir_;
  fs::path repo_;
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(HubCache, HubIdsAreSnapshotsOfTheirRevision) {
  EXPECT_EQ(resolve_model_folder("Org/Tiny"), repo_ / "snapshots" / "c0ffee");
  EXPECT_EQ(resolve_model_folder("Org/Tiny@v1"), repo_ / "snapshots" / "0ld");
  EXPECT_EQ(resolve_model_folder("Org/Tiny@0ld"), repo_ / "snapshots" / "0ld");
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", dir_.path().c_str(), 1);  // $HF_HOME/hub
  EXPECT_EQ(resolve_model_folder("Org/Tiny"), repo_ / "snapshots" / "c0ffee");
}

TEST_F(HubCache, PathsStayPathsAndALocalFolderWins) {
  EXPECT_EQ(resolve_model_folder("/no/such/folder"), fs::path("/no/such/folder"));
  EXPECT_EQ(resolve_model_folder("./Org/Tiny"), fs::path("./Org/Tiny"));
  fs::create_directories(dir_ / "Org" / "Tiny");
  const fs::path previous = fs::current_path();
  fs::current_path(dir_.path());
  EXPECT_EQ(resolve_model_folder("Org/Tiny"), fs::path("Org/Tiny"));
  fs::current_path(previous);
}

TEST_F(HubCache, AMissingModelSaysWhereItLookedAndHowToDownloadIt) {
  const std::string message = error("Qwen/Qwen3-30B-A3B");
  EXPECT_NE(message.find((dir_ / "hub" / "models--Qwen--Qwen3-30B-A3B" / "snapshots" / "main" / "config.json").string()),
            std::string::npos) << message;
  EXPECT_NE(message.find("hf download Qwen/Qwen3-30B-A3B"), std::string::npos) << message;
  EXPECT_NE(error("Org/Tiny@v2").find("hf download Org/Tiny --revision v2"), std::string::npos);
}

// A user meets it on the command line: `moetune inspect Org/Tiny` reads the cached snapshot.
TEST_F(HubCache, CommandsTakeHubIds) {
  const testing::RunResult result = testing::run_moetune("inspect Org/Tiny --json");
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("total_parameters"), std::string::npos) << result.output;
  const testing::RunResult missing = testing::run_moetune("inspect Org/Missing");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("hf download Org/Missing"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace moetune::io
