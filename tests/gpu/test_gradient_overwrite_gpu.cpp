// A step's first backward pass writes the experts' weight gradients instead of adding to them, and zero_grad()
// leaves those gradients' runs alone (model/cuda/step_context.h overwrite_gradients): after zero_grad() the
// gradients must be the one micro-batch's, whatever the previous step left there, and a second micro-batch
// without zero_grad() must still add to them.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/model/cuda/causal_lm.h"
#include "test_util.h"

namespace moetune {
namespace {

class GradientOverwriteGpu : public testing::GpuTest {};

std::vector<Tensor> host_grads(model::cuda::CausalLM& model) {
  std::vector<Tensor> grads;
  for (const Tensor& g : model.parameters().grads()) grads.push_back(g.defined() ? testing::to_cpu_f32(g) : Tensor());
  return grads;
}

// The largest relative error of `scale` x expected over all gradients.
double worst_error(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected, float scale) {
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!actual[i].defined()) continue;
    Tensor scaled = expected[i].clone();
    for (int64_t j = 0; j < scaled.numel(); ++j) scaled.data<float>()[j] *= scale;
    worst = std::max(worst, testing::relative_error_f32(actual[i], scaled));
  }
  return worst;
}

TEST_F(GradientOverwriteGpu, FirstMicroBatchWritesAndLaterOnesAdd) {
  for (const char* name : {"qwen3_moe_tiny", "mixtral_tiny", "nemotron_h_tiny"}) {
    SCOPED_TRACE(name);
    auto model = model::cuda::CausalLM::from_pretrained(testing::fixture(name));
    const int64_t vocab = model.spec().vocab_size;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 48; ++i) ids.push_back((i * 7 + 3) % vocab);
    const Tensor input_ids = Tensor::from_vector(ids, {2, 24});
    const model::Batch batch{.input_ids = input_ids, .labels = input_ids, .output_router_logits = true};

    model.forward_backward(batch);  // gradients made at zero: the first micro-batch
    const std::vector<Tensor> once = host_grads(model);
    model.forward_backward(batch);  // a second micro-batch of the same step adds
    EXPECT_LE(worst_error(host_grads(model), once, 2.0f), 1e-2) << "two micro-batches";
    model.zero_grad();  // the experts' gradients keep two micro-batches' sums here
    model.forward_backward(batch);
    EXPECT_LE(worst_error(host_grads(model), once, 1.0f), 1e-2) << "after zero_grad";
  }
}

}  // namespace
}  // namespace moetune
