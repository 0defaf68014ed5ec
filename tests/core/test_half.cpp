#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "moetune/core/half.h"

namespace moetune {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and the next value: ties go to the even one (1.0).
  EXPECT_EQ(f32_to_bf16(bits_float(0x3f808000u)), 0x3f80);
  // Halfway above an odd mantissa rounds up to even.
  EXPECT_EQ(f32_to_bf16(bits_float(0x3f818000u)), 0x3f82);
  // Just above halfway rounds up.
  EXPECT_EQ(f32_to_bf16(bits_float(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  // The largest finite float rounds past bf16's largest finite value into infinity, as torch does.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(Bf16, NanStaysNan) {
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  // A NaN whose payload sits only in the low bits must not round into infinity.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bits_float(0x7f800001u)))));
}

TEST(Bf16, EveryValueRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    float value = bf16_to_f32(uint16_t(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(f32_to_bf16(value), bits) << std::hex << bits;
  }
}

TEST(F16, EveryValueRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    float value = f16_to_f32(uint16_t(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(value))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(value), bits) << std::hex << bits;
  }
}

// Reference: the f16 value nearest to x (ties to even), found by scanning; checks every rounding branch.
uint16_t nearest_f16(float x) {
  uint16_t best = 0;
  double best_error = INFINITY;
  for (uint32_t bits = 0; bits < 0x7c00u; ++bits) {
    double error = std::fabs(double(f16_to_f32(uint16_t(bits))) - std::fabs(double(x)));
    if (error < best_error || (error == best_error && (bits & 1u) == 0)) {
      best_error = error;
      best = uint16_t(bits);
    }
  }
  if (std::fabs(x) >= 65520.0f) best = 0x7c00;
  return uint16_t(best | (std::signbit(x) ? 0x8000u : 0u));
}

TEST(F16, RoundsToNearestEvenIncludingSubnormals) {
  const float cases[] = {1.0f, 1.0009765625f /* 1 + 2^-10 */, 1.00048828125f /* halfway */,
                         1.00146484375f /* 1.5 ulp */, 3.0e-5f, 6.0e-8f, 2.9802322e-8f /* half the smallest subnormal */,
                         2.9802326e-8f, 6.1035156e-5f /* smallest normal */, 6.1e-5f, 65504.0f, 65519.0f, 65520.0f,
                         -0.3333333f, 1.0e-3f, 12345.678f};
  for (float x : cases) EXPECT_EQ(f32_to_f16(x), nearest_f16(x)) << x;
}

}  // namespace
}  // namespace moetune
