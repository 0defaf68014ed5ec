// NF4 against tests/fixtures/nf4 (tests/reference/make_nf4_fixtures.py: bitsandbytes' definition, checked against
// bitsandbytes 0.50.2): every packed byte, absmax code, scale, the offset and the dequantized values bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "moetune/io/safetensors.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/nf4.h"
#include "test_util.h"

namespace moetune::ops {
namespace {

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data<float>(), b.data<float>(), size_t(a.numel()) * sizeof(float)) == 0;
}

class Nf4 : public ::testing::Test {
 protected:
  Tensor ref(const std::string& name) const { return file_.tensor(name); }
  io::SafetensorsFile file_ = io::SafetensorsFile::open(testing::fixture("nf4") / "nf4.safetensors");
};

TEST_F(Nf4, CodeTablesAreBitsandbytes) {
  EXPECT_EQ(values<float>(ref("nf4_code")), std::vector<float>(nf4_code().begin(), nf4_code().end()));
  EXPECT_EQ(values<float>(ref("dynamic_map")), std::vector<float>(dynamic_map_signed().begin(), dynamic_map_signed().end()));
}

TEST_F(Nf4, DoubleQuantizedMatchesBitForBit) {
  const Nf4Tensor q = nf4_quantize(ref("x"));
  EXPECT_EQ(q.packed, values<uint8_t>(ref("packed")));
  EXPECT_EQ(q.absmax_codes, values<uint8_t>(ref("absmax_codes")));
  EXPECT_EQ(q.absmax_scales, values<float>(ref("absmax_scales")));
  EXPECT_EQ(q.offset, ref("offset").data<float>()[0]);
  EXPECT_TRUE(same_bits(nf4_dequantize(q), ref("dequantized")));
  EXPECT_LT(q.bytes() * 7, size_t(ref("x").nbytes()));  // about 4.13 bits a value
}

TEST_F(Nf4, SingleQuantizedMatchesBitForBit) {
  const Tensor x = ref("small.x");
  const BlockCodes codes = quantize_blocks(x.data<float>(), x.numel(), kNf4BlockSize, nf4_code().data(), 16);
  EXPECT_EQ(nf4_pack(codes.codes), values<uint8_t>(ref("small.packed")));
  EXPECT_EQ(codes.absmax, values<float>(ref("small.absmax")));
  EXPECT_TRUE(same_bits(nf4_dequantize(nf4_pack(codes.codes), codes.absmax, x.shape()), ref("small.dequantized")));
}

// QLoRA's GPU engine quantizes its base on several threads, from the bf16 values the loader assembles: the same
// bytes as one thread from their f32 values.
TEST_F(Nf4, ThreadsAndBf16InputGiveTheSameBytes) {
  const Tensor x = ref("x");
  const Tensor bf16 = cast(x, DType::BF16), rounded = cast(bf16, DType::F32);
  const Nf4Tensor one = nf4_quantize(rounded);
  for (int threads : {2, 7}) {
    SCOPED_TRACE(threads);
    for (const Tensor* input : {&rounded, &bf16}) {
      const Nf4Tensor q = nf4_quantize(*input, threads);
      EXPECT_EQ(q.packed, one.packed);
      EXPECT_EQ(q.absmax_codes, one.absmax_codes);
      EXPECT_EQ(q.absmax_scales, one.absmax_scales);
      EXPECT_EQ(q.offset, one.offset);
    }
  }
  const Nf4Tensor fixture = nf4_quantize(x, 3);  // and the fixture's own values, on threads
  EXPECT_EQ(fixture.packed, values<uint8_t>(ref("packed")));
  EXPECT_EQ(fixture.absmax_codes, values<uint8_t>(ref("absmax_codes")));
}

}  // namespace
}  // namespace moetune::ops
