// LoRA dropout's counter-based masks (ops/lora_dropout.h): the rate, the scale, one mask per (module, draw),
// the same mask whenever asked again (what lets the GPU's backward pass and a recomputed forward regenerate it),
// and the CPU ops that apply it.
#include <gtest/gtest.h>

#include <cmath>

#include "moetune/ops/lora.h"
#include "moetune/ops/lora_dropout.h"

namespace moetune {
namespace {

TEST(LoraDropout, KeepsOneMinusPAndScalesTheKept) {
  for (const double p : {0.05, 0.1, 0.5}) {
    const ops::LoraDropout d = ops::lora_dropout(p, 1234, ops::lora_module_id("layers.0.attn.qkv.lora_A.0"), 0);
    ASSERT_TRUE(d.active());
    constexpr int64_t n = 1 << 20;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) kept += d.keeps(uint64_t(i));
    EXPECT_NEAR(double(kept) / n, 1.0 - p, 0.002) << "p " << p;
    EXPECT_EQ(d.scale, float(1.0 / (1.0 - p)));
    for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(d.apply(uint64_t(i), 2.0f), d.keeps(uint64_t(i)) ? 2.0f * d.scale : 0.0f);
  }
  EXPECT_FALSE(ops::lora_dropout(0.0, 1234, 5, 0).active());
}

// Masks of other draws, modules or seeds are independent of each other; the same arguments give the same mask.
TEST(LoraDropout, OneMaskPerModuleAndDraw) {
  const uint64_t q = ops::lora_module_id("layers.0.attn.qkv.lora_A.0"), k = ops::lora_module_id("layers.0.attn.qkv.lora_A.1");
  const auto agreement = [](const ops::LoraDropout& a, const ops::LoraDropout& b) {
    int64_t same = 0;
    for (int64_t i = 0; i < 100000; ++i) same += a.keeps(uint64_t(i)) == b.keeps(uint64_t(i));
    return double(same) / 100000;
  };
  const ops::LoraDropout base = ops::lora_dropout(0.5, 7, q, 3);
  EXPECT_EQ(agreement(base, ops::lora_dropout(0.5, 7, q, 3)), 1.0);
  for (const ops::LoraDropout& other : {ops::lora_dropout(0.5, 7, q, 4), ops::lora_dropout(0.5, 7, k, 3), ops::lora_dropout(0.5, 8, q, 3)})
    EXPECT_NEAR(agreement(base, other), 0.5, 0.01);
}

TEST(LoraDropout, CpuOpsApplyTheMask) {
  const ops::LoraDropout d = ops::lora_dropout(0.3, 1, 2, 0);
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.25f - 100.0f;
  const Tensor x = Tensor::from_vector(values, {10, 100});
  const Tensor dropped = ops::lora_dropout_apply(x, d);
  Tensor sum = Tensor::from_vector(std::vector<float>(1000, 1.0f), {10, 100});
  ops::lora_dropout_add(x, d, sum);
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(dropped.data<float>()[i], d.keeps(uint64_t(i)) ? values[size_t(i)] * d.scale : 0.0f);
    EXPECT_EQ(sum.data<float>()[i], 1.0f + dropped.data<float>()[i]);
  }
}

}  // namespace
}  // namespace moetune
