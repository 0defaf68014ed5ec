// NF4 on the GPU (ops/cuda/nf4.h) against the CPU reference (ops/nf4.h, itself bit-exact with bitsandbytes'
// definition on tests/reference's fixtures): the dequantization bit-identical in f32 and its bf16 rounding in bf16;
// the quantization the same bytes (codes, absmax codes, scales, offset) from f32 and bf16 inputs; sizes that end
// mid-byte, with a short last block, spanning several absmax groups of 256 blocks, with all-zero blocks.
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

template <typename T>
std::vector<T> host_vector(const Tensor& device) {
  const Tensor host = device.to(Device::cpu());
  return std::vector<T>(static_cast<const T*>(host.raw_data()), static_cast<const T*>(host.raw_data()) + host.numel());
}

TEST_F(Nf4Gpu, QuantizeGivesTheCpusBytes) {
  SCOPED_TRACE(seed());
  for (const DType dtype : {DType::F32, DType::BF16})
    for (const Shape& shape : {Shape{7}, Shape{64}, Shape{96, 64}, Shape{24, 5}, Shape{3, 301, 65}, Shape{1031, 256}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " " << shape_str(shape));
      Tensor weights = testing::random_normal(shape, DType::F32, Device::cpu(), rng(), 0.02f);
      // A block of zeros (absmax 0: codes of 0.0) and one with a large outlier.
      for (int64_t i = 0; i < std::min<int64_t>(64, weights.numel()); ++i) weights.data<float>()[i] = 0.0f;
      if (weights.numel() > 200) weights.data<float>()[150] = 3.0f;
      const Tensor x = ops::cast(weights, dtype);
      const ops::Nf4Tensor expected = ops::nf4_quantize(x);
      const ops::cuda::Nf4DeviceTensor q = ops::cuda::nf4_quantize(x.to(Device::cuda()));
      EXPECT_EQ(q.shape, expected.shape);
      EXPECT_EQ(host_vector<uint8_t>(q.packed), expected.packed);
      EXPECT_EQ(host_vector<uint8_t>(q.absmax_codes), expected.absmax_codes);
      EXPECT_EQ(host_vector<float>(q.absmax_scales), expected.absmax_scales);
      EXPECT_EQ(std::memcmp(&q.offset, &expected.offset, sizeof(float)), 0) << q.offset << " vs " << expected.offset;
    }
}

// A large tensor, as QLoRA's loader uploads one expert tensor (through core/staged_upload.h's pinned buffers).
TEST_F(Nf4Gpu, QuantizesALargeUploadAsTheCpuDoes) {
  const Tensor weights = ops::cast(testing::random_normal({5, 1536, 2048}, DType::F32, Device::cpu(), rng(), 0.02f), DType::BF16);
  const ops::Nf4Tensor expected = ops::nf4_quantize(weights, 8);
  const ops::cuda::Nf4DeviceTensor q = ops::cuda::nf4_quantize(weights.to(Device::cuda()));
  EXPECT_EQ(host_vector<uint8_t>(q.packed), expected.packed);
  EXPECT_EQ(host_vector<uint8_t>(q.absmax_codes), expected.absmax_codes);
  EXPECT_EQ(host_vector<float>(q.absmax_scales), expected.absmax_scales);
  EXPECT_EQ(q.offset, expected.offset);
}

}  // namespace
}  // namespace moetune
