// The hybrid families with recurrent mixers trained by the GPU engine: Nemotron-H (Mamba2, attention without RoPE,
// relu² MLP and latent-MoE layers) and Qwen3-Next (Gated DeltaNet, gated attention, 1 + weight norms, MoE with a
// gated shared expert). The trainer's tiny job on each fixture tracks the CPU engine's from the same weights and
// data (its rows padded, so the recurrent layers restart and zero at padding). Parity per batch is
// test_model_parity.cpp's, every training.recompute mode test_recompute_gpu.cpp's.
#include <gtest/gtest.h>

#include "moetune/core/device.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune {
namespace {

class RecurrentTrainingGpu : public testing::GpuTrainerTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(RecurrentTrainingGpu, TrainsAndTracksTheCpu) {
  const std::string name = GetParam(), model = "model=" + testing::fixture(name).string();
  const train::TrainResult gpu = train::Trainer(recipe("gpu", {model, "training.device=cuda"}), {}, false).run();
  train::Trainer(recipe("cpu", {model}), {}, false).run();
  const std::vector<double> gpu_losses = testing::losses(metrics("gpu")), cpu_losses = testing::losses(metrics("cpu"));
  ASSERT_EQ(gpu_losses.size(), 6u);
  ASSERT_EQ(cpu_losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    std::printf("%s step %zu: cpu %.4f gpu %.4f\n", name.c_str(), i + 1, cpu_losses[i], gpu_losses[i]);
    EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 0.05 * cpu_losses[i]) << "step " << i + 1;
  }
  EXPECT_LT(gpu_losses.back(), gpu_losses.front());
  EXPECT_EQ(gpu.steps, 6);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RecurrentTrainingGpu, ::testing::Values("nemotron_h_tiny", "qwen3_next_tiny"));

}  // namespace
}  // namespace moetune
