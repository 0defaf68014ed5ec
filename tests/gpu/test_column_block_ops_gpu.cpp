// The ops that read or write a block of columns of a wider matrix in place (ops/cuda/column_block.h): RMSNorm
// forward and backward, and MLA's q/k/v assembly taking k_rope (and giving dk_rope) as a block. MLA's kv_a runs
// as one GEMM into [T, latent + rope] this way (model/cuda/mla_attention_block.cpp). Each is checked against the
// same op on a packed copy of the block: the same kernels' arithmetic, so the same bits, and the columns outside
// the block are left as they were.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/cuda/mla_qkv.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/rope.h"

namespace moetune {
namespace {

using testing::poisoned;
using testing::random_normal;

const Device kGpu = Device::cuda();

class ColumnBlockOpsGpu : public testing::GpuTest {};

// Columns [first, first + count) of a BF16 matrix, as a packed BF16 matrix on the same device.
Tensor packed_columns(const Tensor& wide, int64_t first, int64_t count) {
  const Tensor host = wide.to(Device::cpu());
  const int64_t rows = wide.size(0), width = wide.size(1);
  Tensor packed = Tensor::empty({rows, count}, DType::BF16);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(packed.raw_data()) + r * count * 2,
                static_cast<const char*>(host.raw_data()) + (r * width + first) * 2, size_t(count) * 2);
  return packed.to(wide.device());
}

std::vector<char> bytes_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const char*>(host.raw_data());
  return {p, p + host.nbytes()};
}

// The bytes of every column but [first, first + count): what must be left as it was.
std::vector<char> other_columns(const Tensor& wide, int64_t first, int64_t count) {
  std::vector<char> bytes = bytes_of(packed_columns(wide, 0, first));
  const std::vector<char> right = bytes_of(packed_columns(wide, first + count, wide.size(1) - first - count));
  bytes.insert(bytes.end(), right.begin(), right.end());
  return bytes;
}

bool same_bytes(const Tensor& a, const Tensor& b) { return bytes_of(a) == bytes_of(b); }

struct NormCase {
  int64_t rows, width, matrix_width, first;
};

TEST_F(ColumnBlockOpsGpu, RmsNormOnAColumnBlockGivesThePackedBits) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  // MLA's latent (rows-in-registers kernels) and its rope key beside it, a 2048 row inside a wider one (one-row
  // kernels), and an odd stride (the scalar kernels).
  for (const NormCase& c : {NormCase{37, 512, 576, 0}, NormCase{300, 512, 576, 0}, NormCase{19, 64, 576, 512},
                            NormCase{40, 2048, 2056, 8}, NormCase{23, 12, 13, 1}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows of " << c.width << " in " << c.matrix_width << " from "
                                      << c.first);
    const Tensor wide = random_normal({c.rows, c.matrix_width}, DType::BF16, kGpu, rng());
    const Tensor weight = random_normal({c.width}, DType::BF16, kGpu, rng());
    const Tensor packed = packed_columns(wide, c.first, c.width);
    const ops::cuda::ColumnBlock block(wide, c.first, c.width);
    const Tensor y_block = poisoned({c.rows, c.width}, DType::BF16, kGpu), y = poisoned({c.rows, c.width}, DType::BF16, kGpu);
    ops::cuda::rms_norm_forward(block, weight, 1e-6, y_block);
    ops::cuda::rms_norm_forward(packed, weight, 1e-6, y);
    EXPECT_TRUE(same_bytes(y_block, y));

    const Tensor dy = random_normal({c.rows, c.width}, DType::BF16, kGpu, rng());
    const Tensor dwide = random_normal({c.rows, c.matrix_width}, DType::BF16, kGpu, rng());
    const std::vector<char> untouched = other_columns(dwide, c.first, c.width);
    const Tensor dx = poisoned({c.rows, c.width}, DType::BF16, kGpu);
    const Tensor dweight_block = Tensor::zeros({c.width}, DType::F32).to(kGpu), dweight = dweight_block.clone();
    ops::cuda::rms_norm_backward(dy, block, weight, 1e-6, ops::cuda::ColumnBlock(dwide, c.first, c.width), dweight_block);
    ops::cuda::rms_norm_backward(dy, packed, weight, 1e-6, dx, dweight);
    EXPECT_TRUE(same_bytes(packed_columns(dwide, c.first, c.width), dx));
    EXPECT_EQ(other_columns(dwide, c.first, c.width), untouched);
    EXPECT_TRUE(same_bytes(dweight_block, dweight));
  }
  // A block past its matrix's columns is refused.
  const Tensor wide = random_normal({4, 16}, DType::BF16, kGpu, rng());
  const Tensor weight = random_normal({8}, DType::BF16, kGpu, rng());
  EXPECT_THROW(ops::cuda::rms_norm_forward(ops::cuda::ColumnBlock(wide, 12, 8), weight, 1e-6,
                                           poisoned({4, 8}, DType::BF16, kGpu)),
               Error);
}

struct QkvCase {
  int64_t tokens, heads, nope, rope, v_dim, qk_width, v_width, latent;
};

TEST_F(ColumnBlockOpsGpu, MlaQkvTakesTheRopeKeyAsAColumnBlock) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed());
  // Moonlight's widths (the one-launch kernels), q wider than q_proj (the separate kernels), odd widths (their
  // scalar paths).
  for (const QkvCase& c : {QkvCase{33, 16, 128, 64, 128, 192, 128, 512}, QkvCase{29, 4, 16, 8, 16, 32, 16, 40},
                           QkvCase{11, 3, 6, 6, 5, 13, 7, 3}}) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.heads << ", rope " << c.rope << ", latent " << c.latent);
    const int64_t T = c.tokens, H = c.heads, dqk = c.nope + c.rope, wide_width = c.latent + c.rope;
    ops::RopeSpec rope_spec;
    rope_spec.theta = 10000.0;
    const Tensor inv_freq = Tensor::from_vector(ops::rope_inverse_frequencies(rope_spec, c.rope), {c.rope / 2}).to(kGpu);
    std::vector<int32_t> positions(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) positions[size_t(t)] = int32_t((t * 5) % 17);
    const Tensor pos = Tensor::from_vector(positions, {T}).to(kGpu);
    const ops::cuda::MlaQkvLayout layout{c.nope, c.rope, c.v_dim, true, 1.1};
    const bool in_place = c.qk_width == dqk;

    const Tensor q_proj = random_normal({T, H, dqk}, DType::BF16, kGpu, rng());
    const Tensor kv = random_normal({T, H, c.nope + c.v_dim}, DType::BF16, kGpu, rng());
    const Tensor wide = random_normal({T, wide_width}, DType::BF16, kGpu, rng());
    const Tensor k_rope = packed_columns(wide, c.latent, c.rope);
    const ops::cuda::ColumnBlock block(wide, c.latent, c.rope);
    const auto forward = [&](const ops::cuda::ColumnBlock& key) {
      const Tensor q = in_place ? q_proj.clone() : poisoned({T, H, c.qk_width}, DType::BF16, kGpu);
      const Tensor k = poisoned({T, H, c.qk_width}, DType::BF16, kGpu), v = poisoned({T, H, c.v_width}, DType::BF16, kGpu);
      if (in_place)
        ops::cuda::mla_qkv_forward_in_place(q, kv, key, inv_freq, pos, layout, k, v);
      else
        ops::cuda::mla_qkv_forward(q_proj, kv, key, inv_freq, pos, layout, q, k, v);
      return std::vector<Tensor>{q, k, v};
    };
    const std::vector<Tensor> from_block = forward(block), from_packed = forward(k_rope);
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(same_bytes(from_block[i], from_packed[i])) << "forward output " << i;

    const Tensor dq = random_normal({T, H, c.qk_width}, DType::BF16, kGpu, rng());
    const Tensor dk = random_normal({T, H, c.qk_width}, DType::BF16, kGpu, rng());
    const Tensor dv = random_normal({T, H, c.v_width}, DType::BF16, kGpu, rng());
    const auto backward = [&](const ops::cuda::ColumnBlock& dkey) {
      const Tensor dq_here = dq.clone(), dkv = poisoned(kv.shape(), DType::BF16, kGpu);
      const Tensor dq_proj = in_place ? dq_here : poisoned(q_proj.shape(), DType::BF16, kGpu);
      if (in_place)
        ops::cuda::mla_qkv_backward_in_place(dq_here, dk, dv, inv_freq, pos, layout, dkv, dkey);
      else
        ops::cuda::mla_qkv_backward(dq_here, dk, dv, inv_freq, pos, layout, dq_proj, dkv, dkey);
      return std::vector<Tensor>{dq_proj, dkv};
    };
    const Tensor dwide = random_normal({T, wide_width}, DType::BF16, kGpu, rng());
    const std::vector<char> untouched = other_columns(dwide, c.latent, c.rope);
    const Tensor dk_rope = poisoned({T, c.rope}, DType::BF16, kGpu);
    const std::vector<Tensor> into_block = backward(ops::cuda::ColumnBlock(dwide, c.latent, c.rope));
    const std::vector<Tensor> into_packed = backward(dk_rope);
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(same_bytes(into_block[i], into_packed[i])) << "backward output " << i;
    EXPECT_TRUE(same_bytes(packed_columns(dwide, c.latent, c.rope), dk_rope));
    EXPECT_EQ(other_columns(dwide, c.latent, c.rope), untouched);
  }
}

}  // namespace
}  // namespace moetune
