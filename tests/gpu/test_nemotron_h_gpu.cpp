// Nemotron-H (Mamba2, attention without RoPE, relu² MLP and latent-MoE layers) trained by the GPU engine: the
// trainer's tiny job on nemotron_h_tiny tracks the CPU engine's from the same weights and data (its rows padded,
// so the Mamba2 layers restart and zero at padding). Parity per batch is test_model_parity.cpp's, every
// training.recompute mode test_recompute_gpu.cpp's.
#include <gtest/gtest.h>

#include "moetune/core/device.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune {
namespace {

class NemotronHTrainingGpu : public testing::GpuTrainerTest {};

TEST_F(NemotronHTrainingGpu, TrainsAndTracksTheCpu) {
  const std::string model = "model=" + testing::fixture("nemotron_h_tiny").string();
  const train::TrainResult gpu = train::Trainer(recipe("gpu", {model, "training.device=cuda"}), {}, false).run();
  train::Trainer(recipe("cpu", {model}), {}, false).run();
  const std::vector<double> gpu_losses = testing::losses(metrics("gpu")), cpu_losses = testing::losses(metrics("cpu"));
  ASSERT_EQ(gpu_losses.size(), 6u);
  ASSERT_EQ(cpu_losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    std::printf("nemotron_h_tiny step %zu: cpu %.4f gpu %.4f\n", i + 1, cpu_losses[i], gpu_losses[i]);
    EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 0.05 * cpu_losses[i]) << "step " << i + 1;
  }
  EXPECT_LT(gpu_losses.back(), gpu_losses.front());
  EXPECT_EQ(gpu.steps, 6);
}

}  // namespace
}  // namespace moetune
