// The CPU fp32 forward against the logits transformers computed for the same fixture and input.
#include <gtest/gtest.h>

#include <cmath>

#include "moetune/model/causal_lm.h"
#include "moetune/ops/cast.h"
#include "test_util.h"

namespace moetune::model {
namespace {

using testing::relative_error_f32;

void expect_logits_match(const char* fixture, double tolerance) {
  CausalLM model = CausalLM::from_pretrained(testing::fixture(fixture));
  io::SafetensorsFile reference = io::SafetensorsFile::open(testing::fixture(fixture) / "reference.safetensors");
  Tensor logits = model.forward(reference.tensor("input_ids"));
  Tensor expected = reference.tensor("logits");
  ASSERT_EQ(logits.shape(), expected.shape());
  const double error = relative_error_f32(logits, expected);
  EXPECT_LE(error, tolerance) << fixture;
  std::printf("%s: logits relative error %.3g\n", fixture, error);
}

// fp32 fixtures: HF ran in fp32, so the CPU engine must agree to fp32 rounding.
TEST(Forward, Qwen3MoeMatchesTransformers) { expect_logits_match("qwen3_moe_tiny", 1e-5); }
TEST(Forward, LlamaWithLlama3RopeAndBiasesMatchesTransformers) { expect_logits_match("llama_tiny", 1e-5); }
TEST(Forward, MixtralMatchesTransformers) { expect_logits_match("mixtral_tiny", 1e-5); }
TEST(Forward, Qwen2MoeWithSharedExpertMatchesTransformers) { expect_logits_match("qwen2_moe_tiny", 1e-5); }
TEST(Forward, GptOssWithSinksSlidingWindowAndYarnMatchesTransformers) { expect_logits_match("gpt_oss_tiny", 1e-5); }
TEST(Forward, DeepseekV3MatchesTransformers) { expect_logits_match("deepseek_v3_tiny", 1e-5); }
TEST(Forward, DeepseekV3WithQProjTiedMatchesTransformers) { expect_logits_match("deepseek_v3_qproj_tied", 1e-5); }

// bf16 fixtures: HF ran in bf16 and the engine in fp32 from the same weights, so they agree to bf16's
// precision only; this still catches structural mistakes (tying, sparse step, q/k norm) at once.
TEST(Forward, TiedBf16Qwen3MoeMatchesTransformersToBf16Precision) { expect_logits_match("qwen3_moe_tied_bf16", 3e-2); }
TEST(Forward, Qwen3MatchesTransformersToBf16Precision) { expect_logits_match("qwen3_tiny", 3e-2); }
// MXFP4 experts dequantized as transformers does, the rest bf16 on disk; both sides compute in fp32.
TEST(Forward, GptOssFromMxfp4MatchesTransformers) { expect_logits_match("gpt_oss_mxfp4_tiny", 1e-5); }

TEST(Forward, PackedDocumentsDoNotSeeEachOther) {
  CausalLM model = CausalLM::from_pretrained(testing::fixture("qwen3_moe_tiny"));
  const std::vector<int64_t> first = {3, 17, 42, 5}, second = {88, 9, 61};
  std::vector<int64_t> packed_ids = first, positions = {0, 1, 2, 3, 0, 1, 2};
  packed_ids.insert(packed_ids.end(), second.begin(), second.end());
  Tensor packed = model.forward(Tensor::from_vector(packed_ids, {1, 7}), Tensor::from_vector(positions, {1, 7}));
  Tensor alone = model.forward(Tensor::from_vector(second, {1, 3}));
  const int64_t vocab = model.spec().vocab_size;
  Tensor packed_second = packed.view({7, vocab}).narrow(4, 3);
  EXPECT_LE(relative_error_f32(packed_second.clone(), alone.view({3, vocab})), 1e-6);
}

TEST(Forward, TokenOutsideVocabularyIsAnError) {
  CausalLM model = CausalLM::from_pretrained(testing::fixture("llama_tiny"));
  EXPECT_THROW(model.forward(Tensor::from_vector<int64_t>({1, 96}, {1, 2})), Error);
}

}  // namespace
}  // namespace moetune::model
