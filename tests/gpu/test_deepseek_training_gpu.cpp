// DeepSeek-V3 trained by the GPU engine end to end (the trainer's tiny job on deepseek_v3_tiny): the loss falls,
// the run tracks the CPU engine's from the same weights and data, the router's correction bias (a frozen
// buffer: no gradient, no AdamW state) comes back in the saved model exactly as loaded, and with
// training.router_bias_update_rate it moves by multiples of the rate, as on the CPU.
#include <gtest/gtest.h>

#include <cmath>

#include "moetune/core/device.h"
#include "moetune/core/error.h"
#include "moetune/model/checkpoint.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune::train {
namespace {

class DeepseekTrainingGpu : public testing::TrainerTest {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test skipped: " << cuda_unavailable_reason();
    TrainerTest::SetUp();
  }
};

TEST_F(DeepseekTrainingGpu, TrainsTracksTheCpuAndBalancesTheRouterBiasOnlyWhenAsked) {
  const std::string model = "model=" + testing::fixture("deepseek_v3_tiny").string();
  const std::string bias = "layers.1.moe.router_correction_bias";
  const Tensor original = model::load_checkpoint(testing::fixture("deepseek_v3_tiny")).parameter(bias).clone();
  const TrainResult gpu = Trainer(recipe("gpu", {model, "training.device=cuda"}), {}, false).run();
  const TrainResult cpu = Trainer(recipe("cpu", {model}), {}, false).run();
  const std::vector<double> gpu_losses = testing::losses(metrics("gpu")), cpu_losses = testing::losses(metrics("cpu"));
  ASSERT_EQ(gpu_losses.size(), 6u);
  ASSERT_EQ(cpu_losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    std::printf("deepseek_v3_tiny step %zu: cpu %.4f gpu %.4f\n", i + 1, cpu_losses[i], gpu_losses[i]);
    EXPECT_NEAR(gpu_losses[i], cpu_losses[i], 0.05 * cpu_losses[i]) << "step " << i + 1;
  }
  EXPECT_LT(gpu_losses.back(), gpu_losses.front());
  EXPECT_TRUE(model::load_checkpoint(gpu.final_model).parameter(bias).same_bytes(original));
  // training.router_bias_update_rate: after each of the 6 steps each bias moves by ±rate or stays.
  const TrainResult on =
      Trainer(recipe("rate", {model, "training.device=cuda", "training.router_bias_update_rate=0.125"}), {}, false).run();
  const Tensor moved = model::load_checkpoint(on.final_model).parameter(bias);
  testing::expect_balanced_by_whole_steps(original, moved, 0.125, 6);
}

// What the GPU engine does not verify for latent attention is refused before training, naming the key.
TEST_F(DeepseekTrainingGpu, RefusesLoraAndFreezingOnTheGpu) {
  const std::string model = "model=" + testing::fixture("deepseek_v3_tiny").string();
  const auto message = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> overrides = {model, "training.device=cuda"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    try {
      Trainer(recipe("refused", overrides), {}, false).run();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string frozen = message({"training.freeze=[embed_tokens]"});
  EXPECT_NE(frozen.find("training.freeze: 'embed_tokens' is frozen"), std::string::npos) << frozen;
  const std::string lora = message({"lora.rank=4", "lora.alpha=8", "lora.target_modules=[o_proj]"});
  EXPECT_NE(lora.find("lora"), std::string::npos) << lora;
  std::printf("refused on the GPU: %s | %s\n", frozen.c_str(), lora.c_str());
}

}  // namespace
}  // namespace moetune::train
