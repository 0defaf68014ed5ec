// The whole step on the GPU: `moetune finetune` on the embedded default, 50 steps on the CPU and 50 on the GPU
// from the same weights and data; the GPU's loss curve must track the CPU's (bf16 vs fp32: close, not equal).
// Also the GPU peak the engine reports is logged, and `moetune eval` agrees between the devices.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "json_lines.h"
#include "test_util.h"

namespace moetune {
namespace {

class TrainingGpu : public testing::GpuTest {};

TEST_F(TrainingGpu, LossCurveTracksTheCpu) {
  testing::ScratchDir dir;
  std::vector<std::vector<double>> curves;
  for (const std::string device : {"cpu", "cuda"}) {
    const std::string run = (dir / device).string();
    testing::RunResult result = testing::run_moetune(
        "finetune --set training.max_steps=50 --set training.device=" + device + " --set output.dir=" + run);
    ASSERT_EQ(result.status, 0) << result.output;
    // The progress line shows the model TFLOP/s and the allocator's peak on the GPU only.
    const bool shown = result.output.find(" TFLOP/s | GPU peak ") != std::string::npos;
    EXPECT_EQ(shown, device == "cuda") << result.output;
    std::vector<double> losses;
    for (const auto& record : testing::read_json_lines(dir / device / "metrics.jsonl")) {
      losses.push_back(record["loss"].get<double>());
      if (device == "cuda") {
        EXPECT_TRUE(record.contains("gpu_peak_bytes")) << record.dump();
      }
    }
    ASSERT_EQ(losses.size(), 50u) << result.output;
    curves.push_back(losses);
  }
  double worst = 0;
  for (size_t i = 0; i < 50; ++i) {
    const double gap = std::fabs(curves[1][i] - curves[0][i]) / std::fabs(curves[0][i]);
    worst = std::max(worst, gap);
    if (i % 10 == 0 || i == 49) std::printf("step %2zu: cpu %.4f gpu %.4f\n", i + 1, curves[0][i], curves[1][i]);
  }
  std::printf("largest relative gap over 50 steps: %.3f\n", worst);
  EXPECT_LE(std::fabs(curves[1][0] - curves[0][0]) / curves[0][0], 0.01) << "the first loss (same weights, same data)";
  EXPECT_LE(worst, 0.05);
  EXPECT_LT(curves[1][49], 0.7 * curves[1][0]) << "the GPU run learns";
}

}  // namespace
}  // namespace moetune
