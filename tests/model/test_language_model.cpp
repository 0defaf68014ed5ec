// The device-neutral model API (model/language_model.h) on the CPU: the same numbers as the CPU model's own
// forward/backward, and device selection errors that say what is wrong.
#include <gtest/gtest.h>

#include "moetune/moetune.h"
#include "test_util.h"

namespace moetune {
namespace {

TEST(LanguageModelApi, CpuAgreesWithTheCausalLm) {
  const auto folder = testing::fixture("qwen2_moe_tiny");
  std::unique_ptr<LanguageModel> model = load_language_model(folder, "cpu");
  EXPECT_TRUE(model->device().is_cpu());
  AutoModelForCausalLM reference = AutoModelForCausalLM::from_pretrained(folder);
  std::vector<int64_t> values;
  for (int64_t i = 0; i < 12; ++i) values.push_back((i * 11 + 2) % 96);
  const Tensor ids = Tensor::from_vector(values, {1, 12});

  const CausalLMOutput expected = reference.forward({.input_ids = ids, .labels = ids});
  reference.backward();
  EXPECT_EQ(model->loss({.input_ids = ids, .labels = ids}).loss, expected.loss);
  EXPECT_TRUE(model->logits({.input_ids = ids}).same_bytes(expected.logits));
  const CausalLMOutput trained = model->forward_backward({.input_ids = ids, .labels = ids});
  EXPECT_EQ(trained.loss, expected.loss);
  for (size_t i = 0; i < reference.parameters().grads().size(); ++i)
    EXPECT_TRUE(model->parameters().grads()[i].same_bytes(reference.parameters().grads()[i]));
  EXPECT_EQ(model->router_stats().size(), 2u);  // qwen2_moe_tiny: layers 0 and 2 are MoE
  EXPECT_EQ(model->stash_report().size(), 2u * 3u + 1u);
}

TEST(LanguageModelApi, BadDeviceIsNamed) {
  try {
    load_language_model(testing::fixture("llama_tiny"), "tpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tpu'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moetune
