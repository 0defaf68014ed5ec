#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/train/recipe.h"
#include "test_util.h"

namespace moetune::train {
namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_recipe(yaml, "recipe.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Recipe, DefaultsFillEveryKey) {
  Recipe r = parse_recipe("", "recipe.yaml");
  EXPECT_EQ(r.training.micro_batch_size, 4);
  EXPECT_EQ(r.schedule.type, "cosine");
  EXPECT_TRUE(r.data.packing);
  EXPECT_TRUE(r.json["optimizer"].contains("max_grad_norm"));
}

TEST(Recipe, FileThenOverrides) {
  Recipe r = parse_recipe(R"(
model: models/tiny
data:
  train: train.jsonl        # a single file is a list of one
  max_length: 128
optimizer:
  lr: 3e-4
  weight_decay: 0           # an integer where a number is expected
)", "recipe.yaml", {"optimizer.lr=2e-5", "data.packing=false", "output.dir='007'"});
  EXPECT_EQ(r.model, "models/tiny");
  EXPECT_EQ(r.data.train, std::vector<std::string>{"train.jsonl"});
  EXPECT_EQ(r.data.max_length, 128);
  EXPECT_DOUBLE_EQ(r.optimizer.lr, 2e-5);
  EXPECT_DOUBLE_EQ(r.optimizer.weight_decay, 0.0);
  EXPECT_FALSE(r.data.packing);
  EXPECT_EQ(r.output.dir, "007");  // quoted: a string, not the number 7
}

TEST(Recipe, UnknownKeysAreNamed) {
  EXPECT_NE(error_of("optimizer:\n  lrr: 1e-3\n").find("unknown key 'optimizer.lrr'"), std::string::npos);
  EXPECT_NE(error_of("trainer: {}\n").find("unknown key 'trainer'"), std::string::npos);
  EXPECT_NE(error_of("", {"optimizer.lrr=1"}).find("unknown key 'optimizer.lrr'"), std::string::npos);
  EXPECT_NE(error_of("", {"optimizer.lr.x=1"}).find("'optimizer.lr'"), std::string::npos);
}

TEST(Recipe, DataFormatsNameEveryLineShape) {
  for (const char* format : {"auto", "text", "prompt_completion", "messages", "sharegpt", "alpaca", "input_ids"})
    EXPECT_EQ(parse_recipe("", "t", {std::string("data.format=") + format}).data.format, format);
  EXPECT_NE(error_of("data:\n  format: parquet\n").find("'data.format' is 'parquet', not one of"), std::string::npos);
}

TEST(Recipe, AuxLossIsConfigOnOrOff) {
  EXPECT_EQ(parse_recipe("", "t").training.aux_loss, "config");
  EXPECT_EQ(parse_recipe("", "t", {"training.aux_loss=off"}).training.aux_loss, "off");
  EXPECT_NE(error_of("training:\n  aux_loss: maybe\n").find("'training.aux_loss' is 'maybe', not one of: config, on, off"),
            std::string::npos);
}

TEST(Recipe, ChatTemplateKwargsTakeAnyKeys) {
  const Recipe r = parse_recipe("data:\n  chat_template_kwargs: {enable_thinking: false, reasoning_effort: low}\n", "t");
  EXPECT_EQ(r.data.chat_template_kwargs, (nlohmann::json{{"enable_thinking", false}, {"reasoning_effort", "low"}}));
  EXPECT_NE(error_of("data:\n  chat_template_kwargs: 3\n").find("'data.chat_template_kwargs' must be a mapping"),
            std::string::npos);
}

TEST(Recipe, WrongTypesAreNamed) {
  EXPECT_NE(error_of("training:\n  micro_batch_size: two\n").find("'training.micro_batch_size' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("data:\n  packing: 3\n").find("'data.packing' must be true/false"), std::string::npos);
  EXPECT_NE(error_of("data:\n  train: {a: 1}\n").find("'data.train' must be a list"), std::string::npos);
  EXPECT_NE(error_of("schedule:\n  type: exponential\n").find("'schedule.type'"), std::string::npos);
  EXPECT_NE(error_of("training: 5\n").find("'training' must be a mapping"), std::string::npos);
  EXPECT_NE(error_of("optimizer:\n  lr: [1, 2\n").find("not YAML"), std::string::npos);
  EXPECT_NE(error_of("", {"optimizer.lr"}).find("key.path=value"), std::string::npos);
  EXPECT_NE(error_of("", {"optimizer.lr=-1"}).find("'optimizer.lr' must be positive"), std::string::npos);
}

TEST(Recipe, MissingFileIsNamed) {
  try {
    load_recipe("/nonexistent/recipe.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/recipe.yaml"), std::string::npos);
  }
}

}  // namespace
}  // namespace moetune::train

namespace moetune::train {
namespace {

TEST(Recipe, ExamplesParse) {
  for (const char* name : {"tiny-default.yaml", "qwen3-30b-a3b.yaml", "tiny-nemotron-h.yaml"})
    EXPECT_NO_THROW(load_recipe(std::filesystem::path(MOETUNE_FIXTURES_DIR) / ".." / ".." / "examples" / name)) << name;
}

}  // namespace
}  // namespace moetune::train
