// A checkpoint piece the family marks `transposed` (GPT-OSS stores its experts so) lands in the engine parameter
// transposed, in the engine's dtype, and goes back to the file bit-exact.
#include <gtest/gtest.h>

#include "moetune/model/piece_transform.h"
#include "moetune/ops/cast.h"

namespace moetune::model {
namespace {

TEST(PieceTransform, TransposedPiecesRoundTripBitExact) {
  std::vector<float> values;
  for (int i = 0; i < 2 * 3 * 5; ++i) values.push_back(0.25f * float(i) - 3.0f);
  const Tensor hf = ops::cast(Tensor::from_vector(values, {2, 3, 5}), DType::BF16);  // [E, rows, cols] on disk
  const HfTensor piece{"model.layers.0.mlp.experts.gate_up_proj", {2, 3, 5}, /*transposed=*/true};
  EXPECT_EQ(engine_shape(piece), Shape({2, 5, 3}));

  const Tensor engine = Tensor::empty(engine_shape(piece), DType::F32);
  piece_to_engine(hf, piece, engine);
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 5; ++c)
        EXPECT_EQ(engine.data<float>()[(e * 5 + c) * 3 + r], values[size_t((e * 3 + r) * 5 + c)]);
  EXPECT_TRUE(piece_to_hf(engine, piece, DType::BF16).same_bytes(hf));

  const HfTensor plain{"model.layers.0.mlp.down_proj.weight", {2, 3, 5}};
  EXPECT_EQ(engine_shape(plain), Shape({2, 3, 5}));
  EXPECT_TRUE(piece_to_hf(ops::cast(hf, DType::F32), plain, DType::BF16).same_bytes(hf));
}

}  // namespace
}  // namespace moetune::model
