#include <gtest/gtest.h>

#include "moetune/cli/sizes.h"
#include "moetune/core/error.h"
#include "moetune/io/safetensors_folder.h"
#include "test_util.h"

namespace moetune {
namespace {

TEST(Sizes, TransformersSpellings) {
  EXPECT_EQ(cli::parse_size("5GB", "x"), 5000000000u);
  EXPECT_EQ(cli::parse_size("2GiB", "x"), 2147483648u);
  EXPECT_EQ(cli::parse_size("40KB", "x"), 40000u);
  EXPECT_EQ(cli::parse_size("1.5MB", "x"), 1500000u);
  EXPECT_EQ(cli::parse_size("1024", "x"), 1024u);
  EXPECT_THROW(cli::parse_size("lots", "--max-shard-size"), Error);
  EXPECT_THROW(cli::parse_size("5XB", "--max-shard-size"), Error);
  EXPECT_THROW(cli::parse_size("0", "--max-shard-size"), Error);
}

TEST(Convert, ReshardsAFolder) {
  testing::ScratchDir out;
  std::string command = std::string(MOETUNE_BINARY) + " convert " + testing::fixture("qwen3_tiny").string() + " " +
                        out.path().string() + " --max-shard-size 20KB > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0);
  io::SafetensorsFolder folder = io::SafetensorsFolder::open(out.path());
  EXPECT_GT(folder.shard_count(), 1u);
  io::SafetensorsFolder original = io::SafetensorsFolder::open(testing::fixture("qwen3_tiny"));
  ASSERT_EQ(folder.names(), original.names());
  for (const auto& name : original.names()) EXPECT_TRUE(folder.tensor(name).same_bytes(original.tensor(name))) << name;
}

}  // namespace
}  // namespace moetune
