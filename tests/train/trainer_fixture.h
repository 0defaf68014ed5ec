// A small CPU training job on the tiny MoE fixture, for the trainer's tests: 40 token-id lines, 6 steps; and
// the pieces of the SIGINT tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "moetune/core/device.h"
#include "moetune/train/trainer.h"
#include "json_lines.h"
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
  std::vector<json> metrics(const std::string& output) { return testing::read_json_lines(dir_ / output / "metrics.jsonl"); }
  ScratchDir dir_;
};

// The same job for the GPU engine's tests (tests/gpu/): skipped without a GPU.
class GpuTrainerTest : public TrainerTest {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test skipped: " << cuda_unavailable_reason();
    TrainerTest::SetUp();
  }
};

// The training steps' losses of a metrics.jsonl (its records with a grad_norm; validation records have none).
inline std::vector<double> losses(const std::vector<nlohmann::json>& records) {
  std::vector<double> out;
  for (const nlohmann::json& r : records)
    if (r.contains("grad_norm")) out.push_back(r["loss"]);
  return out;
}

// DeepSeek-V3's aux-loss-free balancing after `steps` optimizer steps at `rate`: each correction bias moved by a
// whole number of rates, at most `steps`, and at least one moved.
inline void expect_balanced_by_whole_steps(const Tensor& original, const Tensor& moved, double rate, int steps) {
  bool any = false;
  for (int64_t e = 0; e < moved.numel(); ++e) {
    const double taken = (moved.data<float>()[e] - original.data<float>()[e]) / rate;
    EXPECT_NEAR(taken, std::round(taken), 1e-4) << "expert " << e;
    EXPECT_LE(std::fabs(taken), steps + 1e-4) << "expert " << e;
    any |= std::round(taken) != 0;
  }
  EXPECT_TRUE(any);
}

// Raises SIGINT once the run has logged its first step, so that the signal lands while it trains.
inline void interrupt_after_first_step(const std::filesystem::path& metrics) {
  while (!std::filesystem::exists(metrics) || std::filesystem::file_size(metrics) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::raise(SIGINT);
}

class StopHandlers {  // installs the trainer's handlers for one test, and puts the defaults back
 public:
  StopHandlers() { train::Trainer::install_stop_handlers(); }
  ~StopHandlers() {
    train::Trainer::stop_requested = false;
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
};

}  // namespace moetune::testing
