// Issue 16, items 4, 10 and 13: recipe values and overrides that used to hang, or were accepted although they
// make no sense, are errors naming the key.
#include <gtest/gtest.h>

#include "moetune/core/error.h"
#include "moetune/train/recipe.h"

namespace moetune::train {
namespace {

void expect_error(const std::string& yaml, const std::vector<std::string>& overrides, const std::string& expected) {
  try {
    parse_recipe(yaml, "recipe.yaml", overrides);
    ADD_FAILURE() << "no error for " << yaml << (overrides.empty() ? "" : overrides[0]);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(HostileRecipes, OverridePathsWithEmptyPartsAreErrorsNotAnEndlessLoop) {
  for (const char* bad : {".lr=3", "optimizer.=3", "optimizer..lr=3", "a.=1"})
    expect_error("", {bad}, "has an empty part");
  EXPECT_EQ(parse_recipe("", "t", {"optimizer.lr=3"}).optimizer.lr, 3.0);
}

TEST(HostileRecipes, AliasBombIsRefused) {
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level <= 9; ++level) {
    yaml += "a" + std::to_string(level) + ": &a" + std::to_string(level) + " [";
    for (int i = 0; i < 9; ++i) yaml += std::string(i ? ", " : "") + "*a" + std::to_string(level - 1);
    yaml += "]\n";
  }
  expect_error(yaml, {}, "alias bomb");
}

TEST(HostileRecipes, DuplicateKeysAreNamed) {
  expect_error("optimizer:\n  lr: 1e-3\n  lr: 1e-4\n", {}, "key 'lr' appears twice");
}

TEST(HostileRecipes, OutOfRangeValuesAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"optimizer.beta1=1.0", "optimizer.beta1"},         {"optimizer.beta2=-0.1", "optimizer.beta2"},
      {"optimizer.eps=0", "optimizer.eps"},               {"optimizer.weight_decay=-1", "optimizer.weight_decay"},
      {"schedule.min_lr_ratio=-1", "schedule.min_lr_ratio"}, {"schedule.min_lr_ratio=2", "schedule.min_lr_ratio"},
      {"optimizer.max_grad_norm=-1", "optimizer.max_grad_norm"}, {"output.save_every=-1", "output.save_every"},
      {"logging.validation_every=-5", "logging.validation_every"}, {"training.epochs=1e300", "training.epochs"},
      {"optimizer.lr=nan", "optimizer.lr"},               {"training.max_nonfinite_steps=-1", "max_nonfinite_steps"},
  };
  for (const auto& [assignment, key] : cases) expect_error("", {assignment}, key);
}

}  // namespace
}  // namespace moetune::train
