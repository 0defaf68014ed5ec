// Blockwise 8-bit quantization with bitsandbytes' dynamic maps (ops/blockwise_quant.h), as 8-bit AdamW state
// keeps its moments: the maps are bitsandbytes' own (tests/fixtures/int8_state), every value gets its nearest
// code, and a quantize/dequantize round trip errs by at most half the gap between neighbouring codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "moetune/io/safetensors.h"
#include "moetune/ops/blockwise_quant.h"
#include "test_util.h"

namespace moetune::ops {
namespace {

std::vector<float> map_values(const std::array<float, 256>& map) { return {map.begin(), map.end()}; }

std::vector<float> fixture_map(const std::string& name) {
  const io::SafetensorsFile file = io::SafetensorsFile::open(testing::fixture("int8_state") / "int8_state.safetensors");
  const Tensor t = file.tensor(name);
  return {t.data<float>(), t.data<float>() + t.numel()};
}

TEST(DynamicMap, IsBitsandbytes) {
  EXPECT_EQ(map_values(dynamic_map_signed()), fixture_map("dynamic_map_signed"));
  EXPECT_EQ(map_values(dynamic_map_unsigned()), fixture_map("dynamic_map_unsigned"));
}

// The signed map spans [-0.993, 1] with 0 at code 127; the unsigned one [0, 1] with 0 at code 0. Both are sorted
// and dense near 0: a decade per exponent, down to ~1e-6 (signed) and ~3e-7 (unsigned) of the block's absmax.
TEST(DynamicMap, ShapeOfTheMaps) {
  const auto& s = dynamic_map_signed();
  const auto& u = dynamic_map_unsigned();
  EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  EXPECT_TRUE(std::is_sorted(u.begin(), u.end()));
  EXPECT_EQ(s[127], 0.0f);
  EXPECT_EQ(s[255], 1.0f);
  EXPECT_NEAR(s[0], -0.993, 1e-3);
  EXPECT_EQ(u[0], 0.0f);
  EXPECT_EQ(u[255], 1.0f);
  EXPECT_NEAR(s[128], 5.5e-7, 1e-8);
  EXPECT_NEAR(u[1], 3.25e-7, 1e-9);
  // Four decades below the absmax there are still tens of codes (the point of a dynamic map).
  EXPECT_GT(std::count_if(u.begin(), u.end(), [](float x) { return x > 0 && x < 1e-3f; }), 29);
}

// Values spread over six decades (as Adam's moments are), signed and unsigned, a partial last block and an
// all-zero block.
std::vector<float> moment_like(std::mt19937& rng, int64_t count, bool positive) {
  std::uniform_real_distribution<float> exponent(-6.0f, 0.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> x(static_cast<size_t>(count));
  for (float& v : x) v = std::pow(10.0f, exponent(rng)) * (positive || !negative(rng) ? 1.0f : -1.0f);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  return x;
}

TEST(BlockwiseQuant, EachValueGetsItsNearestCodeAndRoundTripsWithinHalfAGap) {
  std::mt19937 rng(5);
  for (bool positive : {false, true}) {
    SCOPED_TRACE(positive ? "unsigned map" : "signed map");
    const auto& map = positive ? dynamic_map_unsigned() : dynamic_map_signed();
    const int64_t count = 256 * 6 + 100;
    const std::vector<float> x = moment_like(rng, count, positive);
    const BlockCodes q = quantize_blocks(x.data(), count, 256, map.data(), 256);
    ASSERT_EQ(q.absmax.size(), 7u);
    std::vector<float> back(x.size());
    dequantize_blocks(q.codes.data(), q.absmax.data(), count, 256, map.data(), back.data());
    for (int64_t i = 0; i < count; ++i) {
      const float absmax = q.absmax[size_t(i / 256)];
      if (absmax == 0) {
        EXPECT_EQ(back[size_t(i)], 0.0f) << i;  // an all-zero block stays zero
        continue;
      }
      const float unit = x[size_t(i)] / absmax;
      const uint8_t code = q.codes[size_t(i)];
      for (int other = 0; other < 256; ++other)  // no code is nearer (up to float rounding of the midpoints)
        EXPECT_LE(std::fabs(map[code] - unit), std::fabs(map[size_t(other)] - unit) + 1e-7f) << i << " code " << other;
      const float gap = std::max(code > 0 ? map[code] - map[code - 1] : 0.0f, code < 255 ? map[code + 1] - map[code] : 0.0f);
      EXPECT_LE(std::fabs(back[size_t(i)] - x[size_t(i)]), 0.5f * gap * absmax * (1 + 1e-5f)) << i;
    }
    // The absmax of each block is kept exactly: its largest value round-trips exactly (code 1.0, or -0.993 for
    // a negative one, the signed map having no -1).
    for (size_t b = 0; b < q.absmax.size(); ++b) {
      const auto first = x.begin() + int64_t(b) * 256, last = x.begin() + std::min<int64_t>(count, int64_t(b + 1) * 256);
      float expected = 0;
      for (auto it = first; it != last; ++it) expected = std::max(expected, std::fabs(*it));
      EXPECT_EQ(q.absmax[b], expected) << "block " << b;
    }
  }
}

// The GPU's bucketed search gives nearest_code's answer: on both sides of every bucket edge, at every midpoint and
// its float neighbours, at 0, -0, ±1, NaN, and on a million random values spread over the magnitudes.
TEST(BlockwiseQuant, BucketedNearestCodeEqualsTheFullSearch) {
  std::mt19937 rng(7);
  for (const auto* map : {&dynamic_map_signed(), &dynamic_map_unsigned()}) {
    const std::vector<float> midpoints = code_midpoints(map->data(), 256);
    const CodeBuckets buckets = CodeBuckets::build(midpoints);
    int widest = 0;
    for (const CodeBucket& b : buckets.positive) widest = std::max(widest, int(b.span));
    for (const CodeBucket& b : buckets.negative) widest = std::max(widest, int(b.span));
    EXPECT_LE(widest, 3) << "buckets this wide make the search slow; add mantissa bits";
    const auto check = [&](float unit) {
      const uint8_t expected = nearest_code(midpoints.data(), 255, unit);
      ASSERT_EQ(bucketed_nearest_code(midpoints.data(), buckets.positive.data(), buckets.negative.data(), unit),
                expected)
          << "unit " << unit;
    };
    std::vector<float> units = {0.0f, -0.0f, 1.0f, -1.0f, std::nanf(""), 1e-45f, -1e-45f, 0x1p-32f, -0x1p-32f};
    for (float m : midpoints)
      for (float v : {m, std::nextafter(m, -2.0f), std::nextafter(m, 2.0f)}) units.push_back(v);
    for (uint32_t key = kFirstCodeBucketKey; key <= (127u << kCodeBucketMantissaBits); ++key) {
      const float edge = bits_float(key << (23 - kCodeBucketMantissaBits));
      for (float v : {edge, std::nextafter(edge, 0.0f)}) units.insert(units.end(), {v, -v});
    }
    std::uniform_real_distribution<float> exponent(-40.0f, 0.0f), sign(-1.0f, 1.0f);
    for (int i = 0; i < 1000000; ++i) units.push_back(std::copysign(std::exp2(exponent(rng)), sign(rng)));
    for (float unit : units)
      if ((unit >= -1.0f && unit <= 1.0f) || std::isnan(unit)) check(unit);
  }
}

}  // namespace
}  // namespace moetune::ops
