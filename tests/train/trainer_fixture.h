// A small CPU training job on the tiny MoE fixture, for the trainer's tests: 40 token-id lines, 6 steps.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "moetune/train/recipe.h"
#include "test_util.h"

namespace moetune::testing {

class TrainerTest : public ::testing::Test {
 protected:
  using json = nlohmann::json;

  void SetUp() override {
    std::string lines;
    for (int i = 0; i < 40; ++i) {
      json ids = json::array();
      for (int t = 0; t < 5 + i % 7; ++t) ids.push_back((i * 13 + t * 7) % 90 + 2);
      lines += json{{"input_ids", ids}}.dump() + "\n";
    }
    write_file(dir_ / "train.jsonl", lines);
  }
  train::Recipe recipe(const std::string& output, std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides = {"model=" + fixture("qwen3_moe_tiny").string(),
                                          "data.train=" + (dir_ / "train.jsonl").string(),
                                          "output.dir=" + (dir_ / output).string(),
                                          "data.max_length=16", "training.micro_batch_size=2",
                                          "training.gradient_accumulation_steps=2", "training.max_steps=6",
                                          "optimizer.lr=1e-2", "schedule.warmup_steps=2", "data.validation_fraction=0.2",
                                          // The CPU engine's exact resume; the GPU engine is tested in tests/gpu.
                                          "training.device=cpu"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return train::parse_recipe("", "test", overrides);
  }
  std::vector<json> metrics(const std::string& output) {
    std::vector<json> records;
    std::ifstream stream(dir_ / output / "metrics.jsonl");
    for (std::string line; std::getline(stream, line);) records.push_back(json::parse(line));
    return records;
  }
  ScratchDir dir_;
};

}  // namespace moetune::testing
