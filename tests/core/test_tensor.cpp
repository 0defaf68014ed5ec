#include <gtest/gtest.h>

#include "moetune/core/tensor.h"
#include "moetune/ops/cast.h"

namespace moetune {
namespace {

TEST(Tensor, ViewsShareBytes) {
  Tensor t = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  Tensor row = t[1];
  EXPECT_EQ(row.shape(), Shape({2}));
  EXPECT_EQ(row.data<float>()[0], 2.0f);
  row.data<float>()[1] = 30.0f;
  EXPECT_EQ(t.data<float>()[3], 30.0f);
  Tensor middle = t.narrow(1, 2);
  EXPECT_EQ(middle.shape(), Shape({2, 2}));
  EXPECT_EQ(middle.data<float>()[0], 2.0f);
  Tensor flat = t.view({-1});
  EXPECT_EQ(flat.shape(), Shape({6}));
  Tensor slice = t.flat_slice(3, {3});
  EXPECT_EQ(slice.data<float>()[2], 5.0f);
  EXPECT_EQ(t.storage(), slice.storage());
}

TEST(Tensor, BadViewsAreErrors) {
  Tensor t = Tensor::zeros({3, 2}, DType::F32);
  EXPECT_THROW(t.view({4, 2}), Error);
  EXPECT_THROW(t.narrow(2, 2), Error);
  EXPECT_THROW(t.flat_slice(5, {2}), Error);
  EXPECT_THROW(t.data<int32_t>(), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
}

TEST(Tensor, CloneCopies) {
  Tensor t = Tensor::from_vector<int64_t>({1, 2, 3}, {3});
  Tensor copy = t.clone();
  copy.data<int64_t>()[0] = 9;
  EXPECT_EQ(t.data<int64_t>()[0], 1);
  EXPECT_TRUE(t.same_bytes(Tensor::from_vector<int64_t>({1, 2, 3}, {3})));
}

TEST(Tensor, EveryDtypeHasASizeAndName) {
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8, DType::Bool}) {
    auto parsed = dtype_from_name(dtype_name(d));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, d);
    Tensor t = Tensor::zeros({2, 3}, d);
    EXPECT_EQ(t.nbytes(), 6 * dtype_size(d));
  }
  EXPECT_FALSE(dtype_from_name("X99").has_value());
  EXPECT_EQ(dtype_from_torch_name("torch.bfloat16"), DType::BF16);
}

TEST(Cast, FloatTypesConvertOnTheCpu) {
  Tensor f = Tensor::from_vector<float>({1.0f, -2.5f, 3.14159f, 1e-8f}, {4});
  Tensor bf = ops::cast(f, DType::BF16);
  Tensor back = ops::cast(bf, DType::F32);
  EXPECT_EQ(back.data<float>()[1], -2.5f);
  EXPECT_NEAR(back.data<float>()[2], 3.14159f, 0.02f);
  Tensor half = ops::cast(f, DType::F16);
  EXPECT_EQ(ops::cast(half, DType::F32).data<float>()[0], 1.0f);
  EXPECT_THROW(ops::cast(Tensor::zeros({2}, DType::I32), DType::F32), Error);
}

}  // namespace
}  // namespace moetune
