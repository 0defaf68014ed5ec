// optimizer.update_in_backward: AdamW per layer during the backward pass, the decoder layers' gradients in one
// shared buffer. Without clipping and accumulation it is the same update as the step after the backward pass:
// the embedded default's losses and gradient norms must be the same, step for step, in both precisions that
// round to nearest, and the peak lower.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "json_lines.h"
#include "test_util.h"

namespace moetune {
namespace {

class UpdateInBackwardGpu : public testing::GpuTest {};

TEST_F(UpdateInBackwardGpu, SameStepsAsTheUpdateAfterTheBackwardPass) {
  testing::ScratchDir dir;
  for (const std::string precision : {"pure_bf16", "fp32_master"}) {
    SCOPED_TRACE(precision);
    std::vector<std::vector<nlohmann::json>> runs;
    for (const std::string setting : {"off", "on"}) {
      const std::string run = (dir / (precision + "_" + setting)).string();
      const testing::RunResult result = testing::run_moetune(
          "finetune --set training.max_steps=20 --set training.device=cuda --set logging.every=1"
          " --set optimizer.max_grad_norm=0 --set optimizer.precision=" + precision +
          " --set optimizer.update_in_backward=" + setting + " --set output.dir=" + run);
      ASSERT_EQ(result.status, 0) << result.output;
      std::vector<nlohmann::json> steps;
      for (const auto& record : testing::read_json_lines(std::filesystem::path(run) / "metrics.jsonl"))
        if (record.contains("grad_norm")) steps.push_back(record);
      ASSERT_EQ(steps.size(), 20u) << result.output;
      runs.push_back(steps);
    }
    for (size_t i = 0; i < 20; ++i) {
      EXPECT_EQ(runs[1][i]["loss"].get<double>(), runs[0][i]["loss"].get<double>()) << "step " << i + 1;
      EXPECT_NEAR(runs[1][i]["grad_norm"].get<double>(), runs[0][i]["grad_norm"].get<double>(),
                  1e-5 * runs[0][i]["grad_norm"].get<double>()) << "step " << i + 1 << " (summed per layer)";
    }
    EXPECT_LT(runs[1][19]["gpu_peak_bytes"].get<double>(), runs[0][19]["gpu_peak_bytes"].get<double>());
  }
  // "on" where it would not be exact fails before training, saying why.
  const testing::RunResult refused = testing::run_moetune(
      "finetune --set training.max_steps=1 --set training.device=cuda --set optimizer.update_in_backward=on --set output.dir=" +
      (dir / "refused").string());
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.output.find("optimizer.update_in_backward on: clipping needs every gradient first"), std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace moetune
