// bf16/f16 <-> f32 on the GPU must agree with the CPU conversion to the bit, for every 16-bit pattern and
// for f32 values that exercise each rounding branch.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "moetune/core/half.h"
#include "moetune/ops/cast.h"

namespace moetune {
namespace {

// Skipping in SetUp skips the whole test, with the reason in the log.
class CastCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "GPU test skipped: " << cuda_unavailable_reason();
  }
};

Tensor every_16_bit_pattern(DType dtype) {
  Tensor t = Tensor::empty({65536}, dtype);
  for (uint32_t i = 0; i < 65536; ++i) t.data_u16()[i] = uint16_t(i);
  return t;
}

Tensor random_floats(int64_t n) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> bits;
  Tensor t = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = bits_float(bits(rng));  // every exponent, NaNs included
  return t;
}

bool same_bits_nan_aware(const Tensor& a, const Tensor& b) {
  if (a.dtype() == DType::F32) {
    for (int64_t i = 0; i < a.numel(); ++i) {
      float x = a.data<float>()[i], y = b.data<float>()[i];
      if (std::isnan(x) != std::isnan(y) || (!std::isnan(x) && float_bits(x) != float_bits(y))) return false;
    }
    return true;
  }
  return a.same_bytes(b);
}

TEST_F(CastCuda, SixteenBitToF32MatchesCpu) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    Tensor host = every_16_bit_pattern(dtype);
    Tensor expected = ops::cast(host, DType::F32);
    Tensor device_out = Tensor::empty({65536}, DType::F32, Device::cuda());
    ops::cast_into(Tensor::zeros({65536}, DType::F32).to(Device::cuda()), device_out);  // poison with zeros first
    ops::cast_into(host.to(Device::cuda()), device_out);
    EXPECT_TRUE(same_bits_nan_aware(device_out.to(Device::cpu()), expected)) << dtype_name(dtype);
  }
}

TEST_F(CastCuda, F32ToSixteenBitMatchesCpu) {
  Tensor host = random_floats(1 << 20);
  for (DType dtype : {DType::BF16, DType::F16}) {
    Tensor expected = ops::cast(host, dtype);
    Tensor got = ops::cast(host.to(Device::cuda()), dtype).to(Device::cpu());
    EXPECT_TRUE(got.same_bytes(expected)) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace moetune
