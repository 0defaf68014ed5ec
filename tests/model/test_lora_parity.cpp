// LoRA on the CPU engine against PEFT 0.21 (tests/reference/make_lora_parity.py): the fixture's adapter loaded
// onto its base model gives PEFT's logits, loss and LoRA gradients, then the losses and adapter weights of 3
// AdamW steps; saving writes PEFT's names and shapes; merging gives merge_and_unload's logits. Relative error
// per tensor ‖a − b‖ / ‖b‖ at most 1e-5 (3e-5 after AdamW, as test_parity.cpp explains).
#include <gtest/gtest.h>

#include <cmath>

#include "moetune/model/causal_lm.h"
#include "moetune/model/lora_weights.h"
#include "moetune/train/adamw.h"
#include "test_util.h"

namespace moetune::model {
namespace {

constexpr double kTolerance = 1e-5;
constexpr double kAfterAdamwTolerance = 3e-5;

using testing::relative_error_f32;

class LoraParity : public ::testing::TestWithParam<std::pair<std::string, std::string>> {
 protected:
  void SetUp() override {
    base_ = testing::fixture(GetParam().first);
    folder_ = testing::fixture(GetParam().second);
    reference_ = std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(folder_ / "lora_parity.safetensors"));
  }
  Tensor ref(const std::string& name) const { return reference_->tensor(name); }
  Batch batch() const { return {.input_ids = ref("input_ids"), .labels = ref("labels"), .output_router_logits = true}; }

  ModelWeights adapted() const { return load_with_adapter(base_, folder_ / "adapter"); }

  void expect_matches(const io::NamedTensors& tensors, const std::string& prefix, double tolerance) const {
    const io::SafetensorsFile adapter = io::SafetensorsFile::open(folder_ / "adapter" / "adapter_model.safetensors");
    EXPECT_EQ(tensors.size(), adapter.entries().size());
    for (const auto& [name, tensor] : tensors) {
      ASSERT_TRUE(reference_->contains(prefix + name)) << prefix + name;
      EXPECT_LE(relative_error_f32(tensor, ref(prefix + name)), tolerance) << prefix + name;
    }
  }

  std::filesystem::path base_, folder_;
  std::unique_ptr<io::SafetensorsFile> reference_;
};

TEST_P(LoraParity, LogitsLossAndGradients) {
  CausalLM model = CausalLM::from_weights(adapted());
  const CausalLMOutput out = model.forward(batch());
  EXPECT_LE(relative_error_f32(out.logits, ref("logits")), kTolerance);
  EXPECT_NEAR(out.loss, ref("loss").data<float>()[0], kTolerance * std::fabs(out.loss));
  model.backward();
  expect_matches(lora_tensors(model.weights(), model.parameters().grads()), "grad.", kTolerance);
  // The base model is frozen: only the adapters and the modules to save have gradients.
  for (size_t i = 0; i < model.weights().layout.parameters.size(); ++i) {
    const ParameterSpec& spec = model.weights().layout.parameters[i];
    const std::string& hf = spec.pieces[0].name;
    const bool saved_module = hf.ends_with(".mlp.gate.weight") || hf.ends_with(".post_attention_layernorm.weight");
    EXPECT_EQ(model.parameters().grads()[i].defined(),
              is_lora_parameter(spec) || (!model.weights().lora->modules_to_save.empty() && saved_module))
        << spec.name;
  }
}

// Dropout (PEFT's nn.Dropout on the LoRA input) applies in training steps only: evaluation gives PEFT's eval-mode loss.
TEST_P(LoraParity, DropoutOnlyInTrainingSteps) {
  ModelWeights weights = load_checkpoint(base_, LoadOptions{DType::F32});
  LoraConfig config = read_adapter_config(folder_ / "adapter");
  if (!config.target_parameters.empty()) GTEST_SKIP() << "PEFT refuses dropout with target_parameters, and so does moetune";
  config.dropout = 0.5;
  attach_lora(weights, config);
  load_adapter_weights(weights, folder_ / "adapter");
  CausalLM model = CausalLM::from_weights(std::move(weights));
  const double expected = ref("loss").data<float>()[0];
  EXPECT_NEAR(model.loss(batch()).loss, expected, kTolerance * expected);
  const double trained = model.forward_backward(batch()).loss;
  EXPECT_GT(std::fabs(trained - expected), 1e-3);
  EXPECT_NEAR(model.loss(batch()).loss, expected, kTolerance * expected);
}

TEST_P(LoraParity, ThreeAdamwSteps) {
  CausalLM model = CausalLM::from_weights(adapted());
  train::AdamW adamw(model.parameters().values(), model.parameters().grads(), {1e-5, 0.9, 0.999, 1e-8, 0.0});
  const Tensor losses = ref("train.losses");
  for (int64_t step = 0; step < 3; ++step) {
    const CausalLMOutput out = model.forward_backward(batch());
    EXPECT_NEAR(out.loss, losses.data<float>()[step], kTolerance * std::fabs(out.loss)) << "step " << step;
    adamw.step();
    model.zero_grad();
  }
  expect_matches(lora_tensors(model.weights(), model.parameters().values()), "train.param.", kAfterAdamwTolerance);
}

TEST_P(LoraParity, SavedAdapterHasPeftNamesAndShapes) {
  const ModelWeights weights = adapted();
  testing::ScratchDir scratch;
  save_adapter(weights, scratch.path());
  const io::SafetensorsFile saved = io::SafetensorsFile::open(scratch / "adapter_model.safetensors");
  const io::SafetensorsFile peft = io::SafetensorsFile::open(folder_ / "adapter" / "adapter_model.safetensors");
  ASSERT_EQ(saved.entries().size(), peft.entries().size());
  for (const io::SafetensorsEntry& entry : peft.entries()) {
    ASSERT_TRUE(saved.contains(entry.name)) << entry.name;
    EXPECT_EQ(saved.entry(entry.name).shape, entry.shape) << entry.name;
    EXPECT_EQ(relative_error_f32(saved.tensor(entry.name), peft.tensor(entry.name)), 0.0) << entry.name;
  }
  // The saved config reads back to the same settings and adapters.
  const LoraConfig config = read_adapter_config(scratch.path());
  EXPECT_EQ(config.rank, weights.lora->rank);
  EXPECT_EQ(config.scale(), weights.lora->scale());
  EXPECT_EQ(config.target_parameters, weights.lora->target_parameters);
  const ModelWeights reloaded = load_with_adapter(base_, scratch.path());
  const io::NamedTensors before = lora_tensors(weights, weights.parameters), after = lora_tensors(reloaded, reloaded.parameters);
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i].first, before[i].first);
}

TEST(Lora, RefusesWhatPeftWouldLoadDifferently) {
  ModelWeights weights = load_checkpoint(testing::fixture("qwen3_moe_tiny"), LoadOptions{DType::F32});
  LoraConfig config{.rank = 2, .target_modules = {"q_proj", "gate_proj", "up_proj"}};
  EXPECT_THROW(attach_lora(weights, config), Error);  // PEFT would move gate/up_proj onto the experts
  config.target_modules = {"all-linear"};             // the dense MLP (layer 1) is left out, as PEFT leaves it
  attach_lora(weights, config);
  for (const ParameterSpec& spec : weights.layout.parameters) {
    if (is_lora_parameter(spec)) {
      EXPECT_NE(spec.name.find(".attn."), std::string::npos) << spec.name;
    }
  }
  ModelWeights other = load_checkpoint(testing::fixture("qwen3_moe_tiny"), LoadOptions{DType::F32});
  EXPECT_THROW(attach_lora(other, {.rank = 2, .target_modules = {"q_proj", "nonexistent_proj"}}), Error);
  EXPECT_THROW(attach_lora(other, {.rank = 2, .target_parameters = {"mlp.experts.nothing"}}), Error);
}

// DeepSeek-V3 too: PEFT 0.21 converts its gate_proj / up_proj / down_proj (dense layers and shared experts alike)
// as qwen2_moe's, so an all-linear adapter made with them loaded in PEFT with those adapters dropped (and empty
// expert adapters added): the merged models parted by 10% (found with tests/reference/check_lora_adapter.py).
TEST(Lora, RefusesWhatPeftWouldLoadDifferentlyOnDeepseekV3) {
  ModelWeights weights = load_checkpoint(testing::fixture("deepseek_v3_tiny"), LoadOptions{DType::F32});
  EXPECT_THROW(attach_lora(weights, {.rank = 2, .target_modules = {"o_proj", "down_proj"}}), Error);
  attach_lora(weights, {.rank = 2, .target_modules = {"all-linear"}});
  int adapters = 0;
  for (const ParameterSpec& spec : weights.layout.parameters) {
    if (!is_lora_parameter(spec)) continue;
    EXPECT_NE(spec.name.find(".attn."), std::string::npos) << spec.name;
    ++adapters;
  }
  EXPECT_EQ(adapters, 2 * 15);  // A and B on 3 layers × 5 latent projections
  ModelWeights experts = load_checkpoint(testing::fixture("deepseek_v3_tiny"), LoadOptions{DType::F32});
  attach_lora(experts, {.rank = 2, .target_parameters = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}});
}

TEST_P(LoraParity, MergeEqualsMergeAndUnload) {
  ModelWeights weights = adapted();
  merge_lora(weights);
  testing::ScratchDir scratch;
  save_checkpoint(weights, scratch.path());
  CausalLM merged = CausalLM::from_pretrained(scratch.path());
  EXPECT_LE(relative_error_f32(merged.forward(ref("input_ids")), ref("merged.logits")), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LoraParity,
                         ::testing::Values(std::pair<std::string, std::string>{"qwen3_moe_tiny", "qwen3_moe_tiny_lora"},
                                           std::pair<std::string, std::string>{"qwen3_f32", "qwen3_f32_lora"}),
                         [](const auto& fixture) { return fixture.param.second; });

}  // namespace
}  // namespace moetune::model
