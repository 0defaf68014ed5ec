// A checkpoint piece the family marks `transposed` (GPT-OSS stores its experts so) lands in the engine parameter
// transposed, in the engine's dtype, and goes back to the file bit-exact; one marked `interleaved_pairs` (GPT-OSS's
// gate_up_proj and its bias: gate, up, gate, up, ...) lands as [gates; ups] and goes back interleaved; one marked
// `partial_rotary` (GLM-4-MoE's q and k rows) lands in the order that pairs its rotating dimensions as halves.
#include <gtest/gtest.h>

#include "moetune/core/error.h"
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

TEST(PieceTransform, InterleavedGateUpIsDeinterleavedAndBack) {
  // gate_up_proj [E = 2, H = 3, 2I = 4] on disk: column 2j is gate j, column 2j + 1 is up j.
  std::vector<float> values;
  for (int i = 0; i < 2 * 3 * 4; ++i) values.push_back(float(i));
  const Tensor hf = ops::cast(Tensor::from_vector(values, {2, 3, 4}), DType::BF16);
  const HfTensor piece{"model.layers.0.mlp.experts.gate_up_proj", {2, 3, 4}, /*transposed=*/true, /*interleaved_pairs=*/true};
  ASSERT_EQ(engine_shape(piece), Shape({2, 4, 3}));
  const Tensor engine = Tensor::empty(engine_shape(piece), DType::F32);
  piece_to_engine(hf, piece, engine);
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t h = 0; h < 3; ++h) {
        const float gate = values[size_t((e * 3 + h) * 4 + 2 * j)], up = values[size_t((e * 3 + h) * 4 + 2 * j + 1)];
        EXPECT_EQ(engine.data<float>()[(e * 4 + j) * 3 + h], gate);      // row j: gate j
        EXPECT_EQ(engine.data<float>()[(e * 4 + 2 + j) * 3 + h], up);    // row I + j: up j
      }
  EXPECT_TRUE(piece_to_hf(engine, piece, DType::BF16).same_bytes(hf));

  // gate_up_proj_bias [E, 2I]: interleaved along its last dimension, not transposed.
  const Tensor bias = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 4});
  const HfTensor bias_piece{"model.layers.0.mlp.experts.gate_up_proj_bias", {2, 4}, false, true};
  const Tensor engine_bias = Tensor::empty({2, 4}, DType::F32);
  piece_to_engine(bias, bias_piece, engine_bias);
  EXPECT_EQ(std::vector<float>(engine_bias.data<float>(), engine_bias.data<float>() + 8),
            std::vector<float>({0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_TRUE(piece_to_hf(engine_bias, bias_piece, DType::F32).same_bytes(bias));
}

// Heads of 8 rows rotating their first 4 (pairs (0, 2), (1, 3) as transformers' rotate-half within them): the
// engine's head [h0, h1, h4, h5, h2, h3, h6, h7] pairs (i, i + 4): (h0, h2), (h1, h3) rotate, (h4, h6), (h5, h7)
// pass. Two heads of rows of 3 values; both directions, bit-exact, through the piece transforms too.
TEST(PieceTransform, PartialRotaryRowsPairTheRotatingHalves) {
  std::vector<float> values;
  for (int i = 0; i < 16 * 3; ++i) values.push_back(float(i));
  const Tensor hf = Tensor::from_vector(values, {16, 3});
  const PartialRotary rotary{8, 4};
  const Tensor engine = reorder_partial_rotary_rows(hf, rotary, /*to_engine=*/true);
  const int64_t order[] = {0, 1, 4, 5, 2, 3, 6, 7};
  for (int64_t head = 0; head < 2; ++head)
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(engine.data<float>()[(head * 8 + r) * 3 + c], values[size_t((head * 8 + order[r]) * 3 + c)]);
  EXPECT_TRUE(reorder_partial_rotary_rows(engine, rotary, /*to_engine=*/false).same_bytes(hf));

  const HfTensor piece{"model.layers.0.self_attn.q_proj.weight", {16, 3}, false, false, rotary};
  const Tensor into = Tensor::empty({16, 3}, DType::F32);
  piece_to_engine(ops::cast(hf, DType::BF16), piece, into);
  EXPECT_TRUE(into.same_bytes(engine));
  EXPECT_TRUE(piece_to_hf(into, piece, DType::F32).same_bytes(hf));
  // A norm weight [head_dim] is one head; the whole-head identity leaves rows alone.
  const Tensor norm = Tensor::from_vector(std::vector<float>(values.begin(), values.begin() + 8), {8});
  EXPECT_EQ(reorder_partial_rotary_rows(norm, rotary, true).data<float>()[2], 4.0f);
  EXPECT_TRUE(reorder_partial_rotary_rows(hf, PartialRotary{}, true).same_bytes(hf));
}

// ERNIE 4.5's RoPE on interleaved pairs: each head's even rows first, then its odd rows (the pairs' first and
// second elements), so the engine's rotate-half pairs row i with row i + head_dim / 2 as transformers pairs 2i
// with 2i + 1.
TEST(PieceTransform, InterleavedRotaryRowsBecomeHalves) {
  std::vector<float> values;
  for (int i = 0; i < 16 * 2; ++i) values.push_back(float(i));
  const Tensor hf = Tensor::from_vector(values, {16, 2});
  const PartialRotary whole_head{8, 8, 0, /*interleaved=*/true};
  const Tensor engine = reorder_partial_rotary_rows(hf, whole_head, /*to_engine=*/true);
  const int64_t order[] = {0, 2, 4, 6, 1, 3, 5, 7};
  for (int64_t head = 0; head < 2; ++head)
    for (int64_t r = 0; r < 8; ++r)
      EXPECT_EQ(engine.data<float>()[(head * 8 + r) * 2], values[size_t((head * 8 + order[r]) * 2)]) << r;
  EXPECT_TRUE(reorder_partial_rotary_rows(engine, whole_head, /*to_engine=*/false).same_bytes(hf));
  // Partial and interleaved: the rotating pairs as above, the passing rows as PartialRotary orders them.
  const Tensor partial = reorder_partial_rotary_rows(hf, PartialRotary{8, 4, 0, true}, /*to_engine=*/true);
  const int64_t partial_order[] = {0, 2, 4, 5, 1, 3, 6, 7};
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(partial.data<float>()[r * 2], values[size_t(partial_order[r] * 2)]) << r;
}

// Phi-3's qkv_proj: q's and k's heads partially rotated, v's rows after them as stored (rotated_rows).
TEST(PieceTransform, PartialRotaryLeavesTheRowsPastTheRotatedHeads) {
  std::vector<float> values;
  for (int i = 0; i < 24 * 2; ++i) values.push_back(float(i));
  const Tensor hf = Tensor::from_vector(values, {24, 2});
  const Tensor engine = reorder_partial_rotary_rows(hf, PartialRotary{8, 4, 16}, /*to_engine=*/true);
  const Tensor heads = reorder_partial_rotary_rows(hf.narrow(0, 16), PartialRotary{8, 4}, true);
  EXPECT_TRUE(engine.narrow(0, 16).same_bytes(heads));
  EXPECT_TRUE(engine.narrow(16, 8).same_bytes(hf.narrow(16, 8)));
  EXPECT_TRUE(reorder_partial_rotary_rows(engine, PartialRotary{8, 4, 16}, /*to_engine=*/false).same_bytes(hf));
  EXPECT_THROW(reorder_partial_rotary_rows(hf, PartialRotary{8, 4, 12}, true), Error);  // not whole heads
}

}  // namespace
}  // namespace moetune::model
