// The tiny models learn through the C++ API: a fixed batch, AdamW, clipping and a warm-up schedule; the loss
// must fall well below where it started, and the saved folder must reload to the trained model.
#include <gtest/gtest.h>

#include "moetune/moetune.h"
#include "test_util.h"

namespace moetune {
namespace {

Tensor token_batch() {
  std::vector<int64_t> ids;
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t t = 0; t < 12; ++t) ids.push_back((row * 29 + t * 7) % 90 + 3);  // a repeating pattern to memorise
  return Tensor::from_vector(ids, {2, 12});
}

class Training : public ::testing::TestWithParam<std::string> {};

TEST_P(Training, LossFallsAndTheSavedModelReloads) {
  auto model = AutoModelForCausalLM::from_pretrained(testing::fixture(GetParam()));
  AdamW optimizer(model.parameters().values(), model.parameters().grads(), {.lr = 1e-2, .weight_decay = 0.0});
  LrSchedule schedule{train::ScheduleKind::Cosine, 1e-2, 2, 30, 0.1};
  const Tensor ids = token_batch();
  double first = 0, last = 0;
  for (int64_t step = 0; step < 30; ++step) {
    CausalLMOutput out = model.forward({.input_ids = ids, .labels = ids});
    if (step == 0) {
      first = out.loss;
      std::printf("%s: stash for the backward pass %zu bytes for %lld tokens\n", GetParam().c_str(), model.stash_bytes(),
                  static_cast<long long>(ids.numel()));
    }
    last = out.loss;
    model.backward();
    train::clip_grad_norm(model.parameters().grads(), 1.0);
    optimizer.step(schedule.lr(step));
    model.zero_grad();
  }
  std::printf("%s: loss %.4f -> %.4f in 30 steps\n", GetParam().c_str(), first, last);
  EXPECT_LT(last, 0.5 * first);

  testing::ScratchDir out;
  model.save_pretrained(out.path());
  auto reloaded = AutoModelForCausalLM::from_pretrained(out.path());
  EXPECT_TRUE(reloaded.forward(ids).same_bytes(model.forward(ids)));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Training, ::testing::Values("qwen3_moe_tiny", "qwen3_moe_tied_f32", "qwen3_f32", "llama_tiny",
                                                                   "mixtral_tiny", "qwen2_moe_tiny", "gpt_oss_tiny",
                                                                   "deepseek_v3_tiny", "deepseek_v3_qproj_tied",
                                                                   "nemotron_h_tiny"));

TEST(TrainingApi, StashIsCountedPerBlock) {
  auto model = AutoModelForCausalLM::from_pretrained(testing::fixture("qwen3_moe_tiny"));
  const Tensor ids = token_batch();
  model.forward({.input_ids = ids, .labels = ids});
  const model::ModelSpec& c = model.spec();
  const int64_t dense_inner = c.layers[1].sublayers[1].mlp()->intermediate;
  const size_t tokens = size_t(ids.numel()), f = sizeof(float);
  for (const auto& [block, bytes] : model.stash_report()) {
    std::printf("  %-20s %zu bytes\n", block.c_str(), bytes);
    // Layer 1 is dense (mlp_only_layers): its input [T, H] and pre-activation [T, 2I].
    if (block == "layers.1.mlp") {
      EXPECT_EQ(bytes, tokens * size_t(c.hidden_size + 2 * dense_inner) * f);
    }
    if (block == "head") {
      EXPECT_EQ(bytes, tokens * size_t(c.hidden_size + c.vocab_size) * f);
    }
    EXPECT_GT(bytes, 0u) << block;
  }
  EXPECT_EQ(model.stash_report().size(), 2 * size_t(c.num_layers()) + 1);
  model.backward();
  EXPECT_EQ(model.stash_bytes(), 0u);
}

TEST(TrainingApi, BackwardWithoutForwardIsAnError) {
  auto model = AutoModelForCausalLM::from_pretrained(testing::fixture("llama_tiny"));
  EXPECT_THROW(model.backward(), Error);
  model.forward(token_batch());  // logits only: nothing to differentiate
  EXPECT_THROW(model.backward(), Error);
}

}  // namespace
}  // namespace moetune
