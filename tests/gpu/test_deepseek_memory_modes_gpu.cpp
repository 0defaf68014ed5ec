// DeepSeek-V3 under the GPU engine's memory options: training.recompute (the latent attention and the sigmoid
// router run their forward again before their backward) must give the same loss and gradients as keeping
// everything, and optimizer.update_in_backward (AdamW per layer during the backward pass; the router's frozen
// correction bias has no slot) the same steps as the update after the backward pass, with the bias balancing on.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "moetune/core/device.h"
#include "moetune/model/checkpoint.h"
#include "moetune/model/cuda/causal_lm.h"
#include "test_util.h"
#include "train/trainer_fixture.h"

namespace moetune {
namespace {

class DeepseekRecomputeGpu : public testing::GpuTest {};

struct Step {
  double loss = 0;
  std::vector<Tensor> grads;  // host f32; undefined for the frozen correction bias
};

Step run_step(model::cuda::CausalLM& model, const model::Batch& batch, model::Recompute mode) {
  model.set_recompute(mode);
  model.zero_grad();
  const model::CausalLMOutput out = model.forward_backward(batch);
  Step step{out.loss, {}};
  for (const Tensor& g : model.parameters().grads()) step.grads.push_back(g.defined() ? testing::to_cpu_f32(g) : Tensor());
  return step;
}

TEST_F(DeepseekRecomputeGpu, SameLossAndGradientsInEveryMode) {
  for (const char* name : {"deepseek_v3_tiny", "deepseek_v3_qproj_tied"}) {
    SCOPED_TRACE(name);
    auto model = model::cuda::CausalLM::from_pretrained(testing::fixture(name));
    const int64_t rows = 2, seq = 24;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < rows * seq; ++i) ids.push_back((i * 7 + 3) % model.spec().vocab_size);
    const Tensor input_ids = Tensor::from_vector(ids, {rows, seq});
    const model::Batch batch{.input_ids = input_ids, .labels = input_ids};
    const Step reference = run_step(model, batch, model::Recompute::None);
    for (const model::Recompute mode : {model::Recompute::Experts, model::Recompute::Attention, model::Recompute::Full}) {
      SCOPED_TRACE(model::recompute_name(mode));
      const Step step = run_step(model, batch, mode);
      EXPECT_NEAR(step.loss, reference.loss, 1e-6 * std::fabs(reference.loss));
      double worst = 0;
      for (size_t i = 0; i < step.grads.size(); ++i) {
        ASSERT_EQ(step.grads[i].defined(), reference.grads[i].defined());
        if (step.grads[i].defined()) worst = std::max(worst, testing::relative_error_f32(step.grads[i], reference.grads[i]));
      }
      std::printf("%s recompute %s: loss %.6f vs %.6f, worst gradient %.2e\n", name, model::recompute_name(mode),
                  step.loss, reference.loss, worst);
      EXPECT_LE(worst, 1e-2) << "bf16 gradients, summed in another order at most";
    }
  }
}

class DeepseekUpdateInBackwardGpu : public testing::TrainerTest {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test skipped: " << cuda_unavailable_reason();
    TrainerTest::SetUp();
  }
};

TEST_F(DeepseekUpdateInBackwardGpu, SameStepsAsTheUpdateAfterTheBackwardPass) {
  const std::string bias = "layers.1.moe.router_correction_bias";
  std::vector<std::vector<double>> losses;
  std::vector<Tensor> biases;
  for (const std::string setting : {"off", "on"}) {
    const train::TrainResult result =
        train::Trainer(recipe(setting, {"model=" + testing::fixture("deepseek_v3_tiny").string(), "training.device=cuda",
                                        "training.gradient_accumulation_steps=1", "optimizer.max_grad_norm=0",
                                        "training.router_bias_update_rate=0.125",
                                        "optimizer.update_in_backward=" + setting}),
                       {}, false)
            .run();
    losses.push_back(testing::losses(metrics(setting)));
    biases.push_back(model::load_checkpoint(result.final_model).parameter(bias));
  }
  ASSERT_EQ(losses[0].size(), 6u);
  ASSERT_EQ(losses[1].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    std::printf("deepseek_v3_tiny update in backward, step %zu: off %.6f on %.6f\n", i + 1, losses[0][i], losses[1][i]);
    EXPECT_EQ(losses[1][i], losses[0][i]) << "step " << i + 1;
  }
  EXPECT_TRUE(biases[1].same_bytes(biases[0])) << "the correction biases moved alike";
}

}  // namespace
}  // namespace moetune
