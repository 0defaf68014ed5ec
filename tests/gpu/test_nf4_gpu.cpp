// NF4 dequantization on the GPU (ops/cuda/nf4.h) against the CPU reference (ops/nf4.h): bit-identical in f32,
// and its bf16 rounding in bf16; sizes that end mid-byte and span several absmax groups of 256 blocks.
#include <gtest/gtest.h>

#include <cstring>

#include "gpu_test_util.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/nf4.h"
#include "moetune/ops/nf4.h"

namespace moetune {
namespace {

class Nf4Gpu : public testing::GpuTest {};

TEST_F(Nf4Gpu, DequantizeMatchesCpuBitForBit) {
  SCOPED_TRACE(seed());
  // Eight a thread where the count allows (64, 96×64, 24×5: a short last block), one a thread elsewhere.
  for (const Shape& shape : {Shape{7}, Shape{64}, Shape{96, 64}, Shape{24, 5}, Shape{3, 301, 65}}) {
    SCOPED_TRACE(shape_str(shape));
    const Tensor weights = testing::random_normal(shape, DType::F32, Device::cpu(), rng(), 0.02f);
    const ops::Nf4Tensor q = ops::nf4_quantize(weights);
    const Tensor expected = ops::nf4_dequantize(q);
    const ops::cuda::Nf4DeviceTensor device = ops::cuda::upload_nf4(q);
    EXPECT_LE(device.bytes(), q.bytes() + 272 * sizeof(float));

    const Tensor f32 = testing::poisoned(shape, DType::F32, Device::cuda());
    ops::cuda::nf4_dequantize(device, f32);
    const Tensor f32_host = f32.to(Device::cpu());
    EXPECT_EQ(std::memcmp(f32_host.raw_data(), expected.raw_data(), expected.nbytes()), 0) << "f32 differs from the CPU";

    const Tensor bf16 = testing::poisoned(shape, DType::BF16, Device::cuda());
    ops::cuda::nf4_dequantize(device, bf16);
    const Tensor bf16_host = bf16.to(Device::cpu()), expected_bf16 = ops::cast(expected, DType::BF16);
    EXPECT_EQ(std::memcmp(bf16_host.raw_data(), expected_bf16.raw_data(), expected_bf16.nbytes()), 0)
        << "bf16 is not the CPU's values rounded";
  }
}

}  // namespace
}  // namespace moetune
