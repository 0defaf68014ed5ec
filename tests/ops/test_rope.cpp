// RoPE frequency schedules against the values transformers 5.17 computes (ROPE_INIT_FUNCTIONS, head_dim 16,
// theta 10000). The llama3 case puts two frequencies in the smoothly interpolated middle band.
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

TEST(Rope, UnsupportedTypeIsAnError) {
  ops::RopeSpec rope{.type = "yarn"};
  EXPECT_THROW(rope_inverse_frequencies(rope, 16), Error);
}

}  // namespace
}  // namespace moetune::ops
