// training.recompute: a recomputed sublayer keeps only its input and runs its forward again before its backward.
// The step must compute the same loss and the same gradients as without recomputation (the same kernels on the
// same inputs: equal up to the few atomics some backward kernels sum with), and keep what the plan says.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/memory_plan.h"
#include "test_util.h"

namespace moetune {
namespace {

class RecomputeGpu : public testing::GpuTest {};

struct Step {
  double loss = 0, aux_loss = 0;
  std::vector<Tensor> grads;  // host f32
  int64_t stash = 0;          // the blocks' stashes at the end of the forward pass
};

Step run_step(model::cuda::CausalLM& model, const model::Batch& batch, model::Recompute mode) {
  model.set_recompute(mode);
  model.zero_grad();
  const model::CausalLMOutput out = model.forward_backward(batch);
  Step step{out.lm_loss, out.aux_loss, {}, 0};
  for (const Tensor& g : model.parameters().grads()) step.grads.push_back(testing::to_cpu_f32(g));
  for (const auto& [name, bytes] : model.stash_report()) step.stash += int64_t(bytes);
  return step;
}

TEST_F(RecomputeGpu, SameLossAndGradientsInEveryMode) {
  for (const char* name : {"qwen3_moe_tiny", "qwen2_moe_tiny", "mixtral_tiny", "qwen3_f32"}) {
    SCOPED_TRACE(name);
    auto model = model::cuda::CausalLM::from_pretrained(testing::fixture(name));
    const model::ModelSpec& spec = model.spec();
    const int64_t rows = 2, seq = 24;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < rows * seq; ++i) ids.push_back((i * 7 + 3) % spec.vocab_size);
    const Tensor input_ids = Tensor::from_vector(ids, {rows, seq});
    const model::Batch batch{.input_ids = input_ids, .labels = input_ids, .output_router_logits = true};
    const Step reference = run_step(model, batch, model::Recompute::None);
    for (const model::Recompute mode : {model::Recompute::Experts, model::Recompute::Attention, model::Recompute::Full}) {
      SCOPED_TRACE(model::recompute_name(mode));
      const Step step = run_step(model, batch, mode);
      EXPECT_NEAR(step.loss, reference.loss, 1e-6 * std::fabs(reference.loss));
      if (!std::isnan(reference.aux_loss)) {  // MoE models only
        EXPECT_NEAR(step.aux_loss, reference.aux_loss, 1e-6 * std::fabs(reference.aux_loss) + 1e-9) << "aux counted once";
      }
      double worst = 0;
      for (size_t i = 0; i < step.grads.size(); ++i)
        if (step.grads[i].defined()) worst = std::max(worst, testing::relative_error_f32(step.grads[i], reference.grads[i]));
      EXPECT_LE(worst, 1e-2) << "bf16 gradients, summed in another order at most";
      // The plan's stash for this mode: every block's declaration, or the input alone where recomputed (the
      // head's final hidden state is not a block's, and the MoE layers' counts are telemetry).
      int64_t planned = 0;
      for (const model::LayerSpec& layer : spec.layers)
        for (const model::SublayerSpec& sublayer : layer.sublayers)
          planned += model::recomputes(mode, sublayer) ? rows * seq * spec.hidden_size * 2
                                                       : model::gpu_stash_bytes(sublayer, spec.hidden_size, rows * seq);
      EXPECT_EQ(step.stash, planned);
      EXPECT_LT(step.stash, reference.stash);
    }
  }
}

}  // namespace
}  // namespace moetune
