// A step's first backward pass writes the experts' and the dense projections' weight gradients instead of adding
// to them, and zero_grad() leaves those gradients alone (model/cuda/step_context.h overwrite_gradients): after
// zero_grad() the gradients must be the one micro-batch's, whatever the previous step left there, and a second
// micro-batch without zero_grad() must still add to them. The fixtures cover attention with and without biases
// (GPT-OSS, Qwen2-MoE's shared expert gate), latent attention, dense layers, shared experts and Mamba2.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
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
  for (const char* name :
       {"qwen3_moe_tiny", "mixtral_tiny", "nemotron_h_tiny", "deepseek_v3_tiny", "deepseek_v3_qproj_tied",
        "qwen2_moe_tiny", "gpt_oss_tiny", "llama_tiny", "qwen3_next_tiny"}) {
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

// An expert that gets no rows on the step's first micro-batch has its gradient written as zeros, not left at
// what an earlier step put there: a model whose every expert had rows in the step before must then give exactly
// the gradients of a model that starts at zero. The two tokens are picked so that every MoE layer leaves at
// least one expert empty.
TEST_F(GradientOverwriteGpu, ExpertsWithoutRowsGetZeros) {
  for (const char* name : {"qwen3_moe_tiny", "mixtral_tiny"}) {
    SCOPED_TRACE(name);
    auto model = model::cuda::CausalLM::from_pretrained(testing::fixture(name));
    auto fresh = model::cuda::CausalLM::from_pretrained(testing::fixture(name));
    const int64_t vocab = model.spec().vocab_size, experts = model.spec().num_experts();
    const auto batch_of = [](const std::vector<int64_t>& ids) {
      const Tensor input_ids = Tensor::from_vector(ids, {1, int64_t(ids.size())});
      return model::Batch{.input_ids = input_ids, .labels = input_ids, .output_router_logits = true};
    };
    const auto empty_experts = [&](const std::vector<int32_t>& choices) {
      std::vector<bool> used(size_t(experts), false);
      for (const int32_t e : choices) used[size_t(e)] = true;
      std::vector<int64_t> empty;
      for (int64_t e = 0; e < experts; ++e)
        if (!used[size_t(e)]) empty.push_back(e);
      return empty;
    };
    model::Batch two{};
    std::vector<std::vector<int32_t>> routing;
    for (int64_t a = 0; a < vocab && !two.input_ids.defined(); ++a) {
      const model::Batch candidate = batch_of({a, (a * 7 + 3) % vocab});
      routing = model.routing_choices(candidate);
      if (std::all_of(routing.begin(), routing.end(), [&](const auto& c) { return !empty_experts(c).empty(); }))
        two = candidate;
    }
    ASSERT_TRUE(two.input_ids.defined()) << "no two tokens leave an expert empty in every MoE layer";

    std::vector<int64_t> many;
    for (int64_t i = 0; i < 48; ++i) many.push_back((i * 5 + 1) % vocab);
    model.forward_backward(batch_of(many));  // the step before: rows for (nearly) every expert
    model.zero_grad();
    model.forward_backward(two);
    fresh.forward_backward(two);
    const std::vector<Tensor> got = host_grads(model), expected = host_grads(fresh);
    EXPECT_LE(worst_error(got, expected, 1.0f), 1e-3);
    // Each MoE layer's empty experts: exactly zero (the layout lists the layers' experts in walk order).
    size_t moe_layer = 0;
    const auto& parameters = model.weights().layout.parameters;
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (parameters[i].name.find("moe.experts_gate_up") == std::string::npos || !got[i].defined()) continue;
      ASSERT_LT(moe_layer, routing.size());
      for (const int64_t e : empty_experts(routing[moe_layer])) {
        const Tensor slice = got[i][e];
        const float* values = slice.data<float>();
        EXPECT_TRUE(std::all_of(values, values + slice.numel(), [](float v) { return v == 0.0f; }))
            << parameters[i].name << " expert " << e;
      }
      ++moe_layer;
    }
    EXPECT_EQ(moe_layer, routing.size());
  }
}

}  // namespace
}  // namespace moetune
