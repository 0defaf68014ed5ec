#include <gtest/gtest.h>

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

}  // namespace
}  // namespace moetune::model
