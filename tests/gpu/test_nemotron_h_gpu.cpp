// Nemotron-H (Mamba2, attention without RoPE, relu² MLP and latent-MoE layers) trained by the GPU engine: the
// trainer's tiny job on nemotron_h_tiny tracks the CPU engine's from the same weights and data (its rows padded,
// so the Mamba2 layers restart and zero at padding), and every training.recompute mode gives the step the same
// loss and gradients as keeping everything, on a plain batch and on a packed one (documents restart inside a
// row and across the scan's chunks of 4 rows).
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "moetune/core/device.h"
#include "moetune/model/cuda/causal_lm.h"
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

class NemotronHRecomputeGpu : public testing::GpuTest {};

struct Step {
  double loss = 0;
  std::vector<Tensor> grads;  // host f32; undefined for a frozen buffer
};

Step run_step(model::cuda::CausalLM& model, const model::Batch& batch, model::Recompute mode) {
  model.set_recompute(mode);
  model.zero_grad();
  const model::CausalLMOutput out = model.forward_backward(batch);
  Step step{out.loss, {}};
  for (const Tensor& g : model.parameters().grads()) step.grads.push_back(g.defined() ? testing::to_cpu_f32(g) : Tensor());
  return step;
}

TEST_F(NemotronHRecomputeGpu, SameLossAndGradientsInEveryMode) {
  auto model = model::cuda::CausalLM::from_pretrained(testing::fixture("nemotron_h_tiny"));
  const int64_t rows = 2, seq = 23;  // not a multiple of the scan's chunk (4)
  std::vector<int64_t> ids, positions;
  for (int64_t i = 0; i < rows * seq; ++i) ids.push_back((i * 7 + 3) % model.spec().vocab_size);
  // Row 0 packs documents of 9, 6 and 8 tokens (starts inside chunks); row 1 is one document.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < seq; ++t) positions.push_back(r == 1 ? t : t < 9 ? t : t < 15 ? t - 9 : t - 15);
  const Tensor input_ids = Tensor::from_vector(ids, {rows, seq});
  for (const bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "plain");
    model::Batch batch{.input_ids = input_ids, .labels = input_ids};
    if (packed) batch.position_ids = Tensor::from_vector(positions, {rows, seq});
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
      std::printf("nemotron_h_tiny %s recompute %s: loss %.6f vs %.6f, worst gradient %.2e\n", packed ? "packed" : "plain",
                  model::recompute_name(mode), step.loss, reference.loss, worst);
      EXPECT_LE(worst, 1e-2) << "bf16 gradients, summed in another order at most";
    }
  }
}

}  // namespace
}  // namespace moetune
