// RoPE frequency schedules against the values transformers 5.17 computes (ROPE_INIT_FUNCTIONS, head_dim 16,
// theta 10000 unless said). The llama3 case puts two frequencies in the smoothly interpolated middle band; the
// yarn cases put several on its ramp, with and without truncation, and check the attention scaling.
#include <gtest/gtest.h>

#include "moetune/ops/rope.h"

namespace moetune::ops {
namespace {

void expect_frequencies(const ops::RopeSpec& rope, const std::vector<float>& expected) {
  const std::vector<float> actual = rope_inverse_frequencies(rope, 16);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-6 * expected[i]) << i;
}

TEST(Rope, Llama3MatchesTransformersIncludingTheMiddleBand) {
  ops::RopeSpec rope{.type = "llama3", .theta = 10000.0, .factor = 8.0, .low_freq_factor = 1.0,
                      .high_freq_factor = 4.0, .original_max_position_embeddings = 64};
  expect_frequencies(rope, {1.0f, 0.24438458681106567f, 0.013042256236076355f, 0.0039528473280370235f,
                            0.0012499999720603228f, 0.00039528473280370235f, 0.0001250000059371814f,
                            3.9528473280370235e-05f});
}

TEST(Rope, LinearMatchesTransformers) {
  ops::RopeSpec rope{.type = "linear", .theta = 10000.0, .factor = 4.0};
  expect_frequencies(rope, {0.25f, 0.07905694097280502f, 0.02500000037252903f, 0.007905694656074047f,
                            0.0024999999441206455f, 0.0007905694656074047f, 0.0002500000118743628f,
                            7.905694656074047e-05f});
}

TEST(Rope, YarnAsGptOssShipsItMatchesTransformers) {
  ops::RopeSpec rope{.type = "yarn", .theta = 150000.0, .factor = 32.0, .original_max_position_embeddings = 4096,
                     .beta_fast = 32.0, .beta_slow = 1.0, .truncate = false};
  expect_frequencies(rope, {1.0f, 0.22541800141334534f, 0.05081327259540558f, 0.006794959306716919f,
                            0.0004564839182421565f, 1.818833698052913e-05f, 4.099978468730114e-06f,
                            9.242089618055616e-07f});
  EXPECT_NEAR(rope_attention_scaling(rope), 1.3465735902799727, 1e-15);  // 0.1 ln 32 + 1
}

TEST(Rope, YarnTruncatedWithMscaleMatchesTransformers) {
  // truncate absent from the config means true in transformers; mscale / mscale_all_dim set the scaling.
  ops::RopeSpec rope{.type = "yarn", .theta = 10000.0, .factor = 4.0, .original_max_position_embeddings = 2048,
                     .mscale = 0.707, .mscale_all_dim = 1.0};
  expect_frequencies(rope, {1.0f, 0.3162277638912201f, 0.10000000149011612f, 0.025693506002426147f,
                            0.00624999962747097f, 0.0013834965648129582f, 0.0002500000118743628f,
                            7.905694656074047e-05f});
  EXPECT_NEAR(rope_attention_scaling(rope), 0.964326914892074, 1e-15);
  rope.attention_factor = 1.5;  // an explicit attention_factor wins
  EXPECT_EQ(rope_attention_scaling(rope), 1.5);
}

TEST(Rope, OnlyYarnScalesTheRotation) {
  EXPECT_EQ(rope_attention_scaling({.type = "llama3", .factor = 8.0}), 1.0);
  ops::RopeSpec yarn{.type = "yarn", .factor = 8.0};
  const std::vector<float> inv = rope_inverse_frequencies(yarn, 4);
  Tensor x = Tensor::from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f}, {1, 1, 4});
  Tensor back = x.clone();
  apply_rope(back, inv, {5}, false, 2.0);
  apply_rope(back, inv, {5}, /*inverse=*/true, 0.5);  // the rotation undone, the scaling too
  for (int64_t i = 0; i < 4; ++i) EXPECT_NEAR(back.data<float>()[i], x.data<float>()[i], 1e-6);
}

TEST(Rope, UnsupportedTypeIsAnError) {
  ops::RopeSpec rope{.type = "xpos"};
  EXPECT_THROW(rope_inverse_frequencies(rope, 16), Error);
}

}  // namespace
}  // namespace moetune::ops
