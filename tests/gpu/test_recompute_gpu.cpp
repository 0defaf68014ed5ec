// training.recompute: a recomputed sublayer keeps only its input and runs its forward again before its backward.
// The step must compute the same loss and the same gradients as without recomputation (the same kernels on the
// same inputs: equal up to the few atomics some backward kernels sum with), and keep what the plan says; with
// LoRA adapters too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gpu_test_util.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/model/lora_config.h"
#include "moetune/model/lora_memory_plan.h"
#include "moetune/model/lora_weights.h"
#include "moetune/model/memory_plan.h"
#include "moetune/ops/cast.h"
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
  for (const Tensor& g : model.parameters().grads()) step.grads.push_back(g.defined() ? testing::to_cpu_f32(g) : Tensor());  // frozen: none
  for (const auto& [name, bytes] : model.stash_report()) step.stash += int64_t(bytes);
  return step;
}

constexpr int64_t kRows = 2, kSeq = 24;

model::Batch cyclic_batch(int64_t vocab_size) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kRows * kSeq; ++i) ids.push_back((i * 7 + 3) % vocab_size);
  const Tensor input_ids = Tensor::from_vector(ids, {kRows, kSeq});
  return {.input_ids = input_ids, .labels = input_ids, .output_router_logits = true};
}

TEST_F(RecomputeGpu, SameLossAndGradientsInEveryMode) {
  for (const char* name :
       {"qwen3_moe_tiny", "qwen2_moe_tiny", "mixtral_tiny", "qwen3_f32", "nemotron_h_tiny", "qwen3_next_tiny"}) {
    SCOPED_TRACE(name);
    auto model = model::cuda::CausalLM::from_pretrained(testing::fixture(name));
    const model::ModelSpec& spec = model.spec();
    const int64_t rows = kRows, seq = kSeq;
    const model::Batch batch = cyclic_batch(spec.vocab_size);
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
                                                       : model::gpu_stash_bytes(sublayer, spec.hidden_size, rows * seq,
                                                                                model::keeps_outputs(mode, false));
      EXPECT_EQ(step.stash, planned);
      EXPECT_LT(step.stash, reference.stash);
    }
  }
}

// LoRA (issue 12): a recomputed sublayer's forward runs its adapters again, so their u = x·Aᵀ comes back for
// the backward pass; the gradients with recomputation equal those without, and the stash is the plan's
// (model/lora_memory_plan.h: the adapters keep u only where their sublayer is not recomputed). B is random here:
// PEFT starts it at zero, which would leave A's gradient and the adapters' part of d(x) at zero and test nothing.
TEST_F(RecomputeGpu, LoraAdaptersAreRecomputedToo) {
  SCOPED_TRACE(seed());
  model::ModelWeights weights = model::load_checkpoint(testing::fixture("qwen3_moe_tiny"), {DType::BF16, Device::cuda()});
  model::LoraConfig lora;
  lora.rank = 8;
  lora.target_modules = {"all-linear"};
  lora.target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  const size_t base = weights.parameters.size();
  model::attach_lora(weights, lora);
  for (size_t i = base; i < weights.parameters.size(); ++i) {
    Tensor& adapter = weights.parameters[i];
    if (weights.layout.parameters[i].name.find(".lora_B.") != std::string::npos)
      adapter = testing::random_normal(adapter.shape(), DType::F32, Device::cpu(), rng(), 0.05f);
    adapter = ops::cast(adapter, DType::BF16).to(Device::cuda());
  }
  auto model = model::cuda::CausalLM::from_weights(std::move(weights));
  const model::ModelSpec& spec = model.spec();
  const model::Batch batch = cyclic_batch(spec.vocab_size);
  const auto planned = [&](model::Recompute mode, int64_t keep_last_layers = 0) {
    int64_t bytes = model::lora_gpu_stash_bytes(model.weights().layout, lora.rank, kRows * kSeq, mode, keep_last_layers);
    for (int64_t layer = 0; layer < spec.num_layers(); ++layer)
      for (const model::SublayerSpec& sublayer : spec.layers[size_t(layer)].sublayers)
        bytes += model::recomputes(mode, sublayer, layer, spec.num_layers(), keep_last_layers)
                     ? kRows * kSeq * spec.hidden_size * 2
                     : model::gpu_stash_bytes(sublayer, spec.hidden_size, kRows * kSeq,
                                              model::keeps_outputs(mode, /*lora=*/true));
    return bytes;
  };
  const Step reference = run_step(model, batch, model::Recompute::None);
  EXPECT_EQ(reference.stash, planned(model::Recompute::None));
  for (const model::Recompute mode : {model::Recompute::Experts, model::Recompute::Attention, model::Recompute::Full}) {
    SCOPED_TRACE(model::recompute_name(mode));
    const Step step = run_step(model, batch, mode);
    EXPECT_EQ(step.loss, reference.loss) << "the same forward";
    double worst = 0;
    size_t identical = 0, adapters = 0;
    for (size_t i = 0; i < step.grads.size(); ++i) {
      if (!step.grads[i].defined()) continue;  // the frozen base
      ++adapters;
      identical += std::memcmp(step.grads[i].raw_data(), reference.grads[i].raw_data(), step.grads[i].nbytes()) == 0;
      worst = std::max(worst, testing::relative_error_f32(step.grads[i], reference.grads[i]));
    }
    std::printf("LoRA, recompute %s: %zu of %zu adapter gradients bit-identical, largest relative error %.2e; stash %ld vs %ld\n",
                model::recompute_name(mode), identical, adapters, worst, long(step.stash), long(reference.stash));
    EXPECT_GT(adapters, 0u);
    EXPECT_LE(worst, 1e-2) << "bf16 gradients, summed in another order at most";
    EXPECT_EQ(step.stash, planned(mode));
    EXPECT_LT(step.stash, reference.stash);
  }
  // training.recompute_keep_layers: the last layer keeps its stash; the same gradients again.
  model.set_recompute(model::Recompute::Full, 1);
  model.zero_grad();
  EXPECT_EQ(model.forward_backward(batch).lm_loss, reference.loss);
  int64_t stash = 0;
  for (const auto& [name, bytes] : model.stash_report()) stash += int64_t(bytes);
  EXPECT_EQ(stash, planned(model::Recompute::Full, 1));
  EXPECT_GT(stash, planned(model::Recompute::Full));
  double worst = 0;
  for (size_t i = 0; i < reference.grads.size(); ++i)
    if (reference.grads[i].defined())
      worst = std::max(worst, testing::relative_error_f32(testing::to_cpu_f32(model.parameters().grads()[i]), reference.grads[i]));
  EXPECT_LE(worst, 1e-2);
}

// LoRA dropout (ops/lora_dropout.h): a recomputed forward repeats its first pass's masks and the backward pass
// regenerates them, so a fresh model's first step gives the same loss and gradients with recomputation as without;
// a model without dropout, or the next step's new masks, do not.
TEST_F(RecomputeGpu, LoraDropoutMasksRepeatInTheRecomputedForward) {
  SCOPED_TRACE(seed());
  const auto adapted = [&](double dropout) {
    model::ModelWeights weights = model::load_checkpoint(testing::fixture("qwen3_moe_tiny"), {DType::BF16, Device::cuda()});
    model::LoraConfig lora;
    lora.rank = 8;
    lora.dropout = dropout;
    lora.target_modules = {"all-linear"};
    const size_t base = weights.parameters.size();
    model::attach_lora(weights, lora);
    std::mt19937 same(seed());  // the same random B in every model
    for (size_t i = base; i < weights.parameters.size(); ++i) {
      Tensor& adapter = weights.parameters[i];
      if (weights.layout.parameters[i].name.find(".lora_B.") != std::string::npos)
        adapter = testing::random_normal(adapter.shape(), DType::F32, Device::cpu(), same, 0.05f);
      adapter = ops::cast(adapter, DType::BF16).to(Device::cuda());
    }
    return model::cuda::CausalLM::from_weights(std::move(weights));
  };
  auto plain = adapted(0.5);
  const model::Batch batch = cyclic_batch(plain.spec().vocab_size);
  const Step reference = run_step(plain, batch, model::Recompute::None);
  for (const model::Recompute mode : {model::Recompute::Attention, model::Recompute::Full}) {
    SCOPED_TRACE(model::recompute_name(mode));
    auto recomputing = adapted(0.5);
    const Step step = run_step(recomputing, batch, mode);
    EXPECT_EQ(step.loss, reference.loss) << "the same forward, the same masks";
    double worst = 0;
    for (size_t i = 0; i < step.grads.size(); ++i)
      if (step.grads[i].defined()) worst = std::max(worst, testing::relative_error_f32(step.grads[i], reference.grads[i]));
    std::printf("LoRA dropout 0.5, recompute %s: largest relative gradient error %.2e\n", model::recompute_name(mode), worst);
    EXPECT_LE(worst, 1e-2);
  }
  auto without = adapted(0.0);
  EXPECT_NE(run_step(without, batch, model::Recompute::None).loss, reference.loss) << "the masks act";
  EXPECT_NE(run_step(plain, batch, model::Recompute::None).loss, reference.loss) << "the next step draws new masks";
}

}  // namespace
}  // namespace moetune
