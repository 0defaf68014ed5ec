// Generation on the CPU engine: greedy and sampled, with the KV cache and without (each token re-running the whole
// sequence), against transformers' greedy generate.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moetune/model/causal_lm.h"
#include "moetune/model/generate.h"
#include "test_util.h"

namespace moetune::model {
namespace {

TEST(Generate, GreedyFollowsTheArgmaxAndStops) {
  CausalLM model = CausalLM::from_pretrained(testing::fixture("llama_tiny"));
  const std::vector<int64_t> prompt = {3, 17, 42};
  const std::vector<int64_t> greedy = generate(model, prompt, {.max_new_tokens = 5});
  ASSERT_EQ(greedy.size(), 5u);
  // Each token is the argmax of the logits after the sequence so far.
  std::vector<int64_t> sequence = prompt;
  for (int64_t token : greedy) {
    const Tensor logits = model.forward(Tensor::from_vector(sequence, {1, int64_t(sequence.size())}));
    const float* last = logits.data<float>() + (int64_t(sequence.size()) - 1) * model.spec().vocab_size;
    EXPECT_EQ(token, std::max_element(last, last + model.spec().vocab_size) - last);
    sequence.push_back(token);
  }
  const std::vector<int64_t> stopped = generate(model, prompt, {.max_new_tokens = 5, .stop_ids = {greedy[1]}});
  EXPECT_EQ(stopped, (std::vector<int64_t>{greedy[0], greedy[1]}));
}

TEST(Generate, SamplingIsSeededAndTinyTopPIsGreedy) {
  CausalLM model = CausalLM::from_pretrained(testing::fixture("qwen3_moe_tiny"));
  const std::vector<int64_t> prompt = {5, 6, 7};
  GenerateOptions sampled{.max_new_tokens = 8, .temperature = 1.5, .top_p = 0.9, .seed = 3};
  EXPECT_EQ(generate(model, prompt, sampled), generate(model, prompt, sampled));
  GenerateOptions nucleus_of_one{.max_new_tokens = 8, .temperature = 1.0, .top_p = 1e-6, .seed = 3};
  EXPECT_EQ(generate(model, prompt, nucleus_of_one), generate(model, prompt, {.max_new_tokens = 8}));
  EXPECT_THROW(generate(model, {}, {}), Error);
}

// transformers' greedy tokens (tests/reference/make_generate_fixtures.py) on every family, attention with sinks and
// a sliding window shorter than the sequence (gpt_oss_tiny), latent attention (deepseek_v3_tiny) and partial RoPE
// (glm4_moe_tiny, glm4_moe_quarter_tied), and GLM-4-MoE-Lite's latent attention (glm4_moe_lite_tiny) included: the
// cached and the uncached path give them, and their logits agree at every step.
TEST(Generate, KvCacheGivesTransformersGreedyTokens) {
  const nlohmann::json expected = nlohmann::json::parse(testing::read_file(testing::fixture("generate") / "greedy.json"));
  const std::vector<int64_t> prompt = expected["prompt"];
  for (const auto& [name, tokens] : expected["greedy"].items()) {
    SCOPED_TRACE(name);
    CausalLM model = CausalLM::from_pretrained(testing::fixture(name));
    const int64_t count = int64_t(tokens.size());
    EXPECT_EQ(generate(model, prompt, {.max_new_tokens = count}), tokens.get<std::vector<int64_t>>());
    EXPECT_EQ(generate(model, prompt, {.max_new_tokens = count, .kv_cache = false}), tokens.get<std::vector<int64_t>>());
    // Logits of the cached path, fed a token at a time (and two at once), against the whole sequence's.
    std::vector<int64_t> sequence = prompt;
    for (int64_t token : tokens) sequence.push_back(token);
    const int64_t length = int64_t(sequence.size()), vocab = model.spec().vocab_size;
    const Tensor whole = model.forward(Tensor::from_vector(sequence, {1, length})).view({length, vocab});
    KvCache cache;
    for (int64_t at = int64_t(prompt.size()); cache.tokens() < length; at += at % 3 == 0 ? 2 : 1) {
      const int64_t end = std::min(at, length);
      const Tensor logits =
          model.next_token_logits(std::vector<int64_t>(sequence.begin() + cache.tokens(), sequence.begin() + end), cache);
      EXPECT_LT(testing::relative_error_f32(logits, whole.narrow(end - 1, 1).view({-1})), 1e-5) << "after " << end;
    }
    EXPECT_EQ(cache.tokens(), length);
  }
}

// Past longrope's original context (phi4_mini_tiny's 32 positions; 6 + 40 tokens). Phi-3's generate means to drop
// its cache when the sequence first passes 32 tokens and run the whole of it on the long factors
// (prepare_inputs_for_generation; transformers PR #33129), which gives what generating without a cache gives: moetune's
// cached and uncached paths both give transformers' uncached tokens. transformers 5.17's own cached generate does not:
// after dropping the cache it runs only the newest token (the inputs already sliced to the uncached ones), with no
// cache, at every later step too (traced: past None at positions 32, 33, 34), so each token past the switch attends to
// itself alone; the fixture records those tokens ("cached": they part from the uncached ones at the 28th, 41 against
// 27) and moetune does not follow them. Kept without the reset, moetune's cache of short-factor keys would part from
// both. The reset is Phi-3's alone.
TEST(Generate, LongropePastItsOriginalContextAsTransformersGenerates) {
  const nlohmann::json expected =
      nlohmann::json::parse(testing::read_file(testing::fixture("generate") / "greedy.json"));
  const std::vector<int64_t> prompt = expected["prompt"];
  const nlohmann::json& past = expected["past_original_context"]["phi4_mini_tiny"];
  const std::vector<int64_t> cached = past["cached"], uncached = past["uncached"];
  CausalLM model = CausalLM::from_pretrained(testing::fixture("phi4_mini_tiny"));
  const int64_t count = int64_t(cached.size());
  ASSERT_NE(cached, uncached);
  EXPECT_EQ(generate(model, prompt, {.max_new_tokens = count}), uncached);
  EXPECT_EQ(generate(model, prompt, {.max_new_tokens = count, .kv_cache = false}), uncached);
  EXPECT_EQ(model.spec().generation_cache_reset_length, 32);
  EXPECT_TRUE(generation_resets_cache(model.spec(), 33, 32));   // the step past the original context
  EXPECT_FALSE(generation_resets_cache(model.spec(), 34, 33));  // once: the cache then holds long-factor keys
  EXPECT_FALSE(generation_resets_cache(model.spec(), 32, 31));
  EXPECT_FALSE(generation_resets_cache(CausalLM::from_pretrained(testing::fixture("llama_tiny")).spec(), 33, 32));
}

// The sliding-window and YaRN fixtures that tests/fixtures/generate has no transformers tokens for: GPU generation
// is held to the CPU engine's uncached greedy tokens there (tests/gpu/test_generate_gpu.cpp), and the CPU's cached
// path gives the same, well past their windows of 3 to 5 keys.
TEST(Generate, KvCacheGivesTheUncachedTokensPastTheWindows) {
  const std::vector<int64_t> prompt = {3, 17, 42, 5, 88, 9};
  for (const char* name :
       {"qwen3_sliding_yarn", "mistral_tiny", "mixtral_sliding_dynamic", "qwen2_tiny", "phi3_tiny", "smollm3_tiny"}) {
    SCOPED_TRACE(name);
    CausalLM model = CausalLM::from_pretrained(testing::fixture(name));
    EXPECT_EQ(generate(model, prompt, {.max_new_tokens = 20}),
              generate(model, prompt, {.max_new_tokens = 20, .kv_cache = false}));
  }
}

}  // namespace
}  // namespace moetune::model
