// MOETUNE_SWIGLU_BACKWARD=epilogue (model/cuda/swiglu_backward_choice.h): SwiGLU's backward in the down projection's
// input-gradient GEMM (the routed experts', and as one group the dense MLPs' and shared experts') gives the step the
// kernel path gives, with the forward's activations kept (no recomputation) and recomputed (the epilogue also
// writes the activation for down's weight gradient). The op's own bits are checked in test_grouped_gemm.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/cuda/swiglu_backward_choice.h"
#include "moetune/model/recompute.h"
#include "test_util.h"

namespace moetune {
namespace {

class SwigluBackwardEpilogueGpu : public testing::GpuTest {
 protected:
  void TearDown() override { model::cuda::set_swiglu_backward_in_epilogue(false); }
};

struct Step {
  double loss = 0;
  std::vector<Tensor> grads;  // host f32
};

Step run_step(model::cuda::CausalLM& model, const model::Batch& batch, bool in_epilogue) {
  model::cuda::set_swiglu_backward_in_epilogue(in_epilogue);
  model.zero_grad();
  const model::CausalLMOutput out = model.forward_backward(batch);
  Step step{out.lm_loss, {}};
  for (const Tensor& g : model.parameters().grads())
    step.grads.push_back(g.defined() ? testing::to_cpu_f32(g) : Tensor());
  return step;
}

TEST_F(SwigluBackwardEpilogueGpu, SameStepAsTheKernel) {
  constexpr int64_t kRows = 2, kSeq = 40;
  for (const char* name : {"qwen3_moe_tiny", "qwen2_moe_tiny", "mixtral_tiny", "deepseek_v3_tiny", "qwen3_tiny"}) {
    SCOPED_TRACE(name);
    auto model = model::cuda::CausalLM::from_pretrained(testing::fixture(name));
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < kRows * kSeq; ++i) ids.push_back((i * 7 + 3) % model.spec().vocab_size);
    const Tensor input_ids = Tensor::from_vector(ids, {kRows, kSeq});
    const model::Batch batch{.input_ids = input_ids, .labels = input_ids, .output_router_logits = true};
    for (const model::Recompute mode : {model::Recompute::None, model::Recompute::Experts}) {
      SCOPED_TRACE(model::recompute_name(mode));
      model.set_recompute(mode);
      const Step kernel = run_step(model, batch, false);
      const Step epilogue = run_step(model, batch, true);
      EXPECT_NEAR(epilogue.loss, kernel.loss, 1e-6 * std::fabs(kernel.loss)) << "the forward pass is the same";
      ASSERT_EQ(epilogue.grads.size(), kernel.grads.size());
      double worst = 0;
      for (size_t i = 0; i < kernel.grads.size(); ++i)
        if (kernel.grads[i].defined())
          worst = std::max(worst, testing::relative_error_f32(epilogue.grads[i], kernel.grads[i]));
      // The routed experts' backward gives the same bits; a dense MLP's d(activated) comes from CUTLASS's GEMM
      // instead of cuBLASLt's (another summation order, bf16 roundings apart), and some backward kernels sum with
      // atomics: the recomputation test's bound.
      EXPECT_LE(worst, 1e-2);
    }
  }
}

}  // namespace
}  // namespace moetune
