// The pointwise and row kernels of a transformer layer (RMSNorm, attention prep with q/k norm and RoPE, SwiGLU,
// embedding, sums) against the fp32 CPU references, on fp32 copies of the same bf16 inputs. Every output starts
// poisoned; every output is compared, gradients included. Widths cover the 16-byte vector paths (2048, 768, 64,
// 128) and the scalar fallbacks (70, 37, odd head_dim halves, misaligned views), plus empty inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "gpu_test_util.h"
#include "moetune/ops/activation.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/activation.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/embedding.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/cuda/qkv_rope.h"
#include "moetune/ops/embedding.h"
#include "moetune/ops/norm.h"
#include "moetune/ops/relu_squared.h"
#include "moetune/ops/rope.h"

namespace moetune {
namespace {

using testing::kBf16Tolerance;
using testing::poisoned;
using testing::relative_error;
using testing::to_cpu_f32;

// Sums of fp32 values computed the same way on both sides: only the summation order differs.
constexpr double kF32Tolerance = 1e-6;
constexpr double kEps = 1e-6;

class PointwiseGpuTest : public testing::GpuTest {
 protected:
  Tensor random_gpu(const Shape& shape, DType dtype = DType::BF16, float scale = 1.0f) {
    return testing::random_normal(shape, dtype, Device::cuda(), rng(), scale);
  }
  // Norm weights near 1, as trained ones are, so that the normalised values dominate the comparison.
  Tensor random_weight(int64_t width) {
    Tensor host = testing::random_normal({width}, DType::F32, Device::cpu(), rng(), 0.2f);
    for (int64_t i = 0; i < width; ++i) host.data<float>()[i] += 1.0f;
    return ops::cast(host, DType::BF16).to(Device::cuda());
  }
};

// The bytes of a GPU tensor, for checks that something is unchanged or bit-identical.
std::vector<char> bytes_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const char*>(host.raw_data());
  return {p, p + host.nbytes()};
}

Tensor upload_i32(const std::vector<int32_t>& values) {
  return Tensor::from_vector(values, {int64_t(values.size())}).to(Device::cuda());
}

// ---------------------------------------------------------------------------------------------------------------
// RMSNorm

// How the backward's dx is stored: a fresh tensor, or the residual's or dy's own storage (in place).
enum class DxStorage { Fresh, Residual, Dy };

class NormGpu : public PointwiseGpuTest {
 protected:
  // Backward with dweight in `dweight_dtype`, starting from random values (it accumulates), with or without a
  // residual.
  void check_backward(const Shape& shape, DType dweight_dtype, bool with_residual, DxStorage dx_storage,
                      float weight_offset = 0.0f) {
    SCOPED_TRACE(::testing::Message() << shape_str(shape) << " dweight " << dtype_name(dweight_dtype) << " residual "
                                      << with_residual << " dx storage " << int(dx_storage) << " weight offset "
                                      << weight_offset);
    const int64_t width = shape.back();
    const Tensor dy = random_gpu(shape), x = random_gpu(shape), weight = random_weight(width);
    const Tensor residual = with_residual ? random_gpu(shape) : Tensor();
    const Tensor dweight = random_gpu({width}, dweight_dtype);

    Tensor expected_dweight = to_cpu_f32(dweight);
    Tensor expected_dx = ops::rms_norm_backward(to_cpu_f32(dy), to_cpu_f32(x), to_cpu_f32(weight), kEps,
                                                expected_dweight, weight_offset);
    if (with_residual) {
      const Tensor r = to_cpu_f32(residual);
      for (int64_t i = 0; i < r.numel(); ++i) expected_dx.data<float>()[i] += r.data<float>()[i];
    }

    Tensor dx;
    if (dx_storage == DxStorage::Residual) dx = residual;
    else if (dx_storage == DxStorage::Dy) dx = dy;
    else dx = poisoned(shape, DType::BF16, Device::cuda());
    ops::cuda::rms_norm_backward(dy, x, weight, kEps, dx, dweight, residual, weight_offset);
    EXPECT_LT(relative_error(dx, expected_dx), kBf16Tolerance);
    EXPECT_LT(relative_error(dweight, expected_dweight), kBf16Tolerance);
  }
};

TEST_F(NormGpu, ForwardMatchesCpu) {
  SCOPED_TRACE(seed());
  for (const Shape& shape : std::vector<Shape>{{7, 2048}, {33, 70}, {5, 37}, {2, 3, 64}, {1, 8}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t width = shape.back();
    const Tensor x = random_gpu(shape), weight = random_weight(width);
    const Tensor y = poisoned(shape, DType::BF16, Device::cuda());
    ops::cuda::rms_norm_forward(x, weight, kEps, y);
    const Tensor expected = ops::rms_norm_forward(to_cpu_f32(x), to_cpu_f32(weight), kEps);
    EXPECT_LT(relative_error(y, expected), kBf16Tolerance);
  }
}

// Gemma's norms scale by 1 + weight: the one-row kernels (2048, 37 wide), the rows-in-registers ones (256, 512),
// forward and backward, with and without a residual.
TEST_F(NormGpu, WeightOffsetMatchesCpu) {
  SCOPED_TRACE(seed());
  for (const Shape& shape : std::vector<Shape>{{7, 2048}, {300, 256}, {33, 512}, {5, 37}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t width = shape.back();
    const Tensor x = random_gpu(shape), weight = random_weight(width);
    const Tensor y = poisoned(shape, DType::BF16, Device::cuda());
    ops::cuda::rms_norm_forward(x, weight, kEps, y, /*weight_offset=*/1.0f);
    const Tensor expected = ops::rms_norm_forward(to_cpu_f32(x), to_cpu_f32(weight), kEps, 1.0f);
    EXPECT_LT(relative_error(y, expected), kBf16Tolerance);
    check_backward(shape, DType::F32, /*with_residual=*/false, DxStorage::Fresh, 1.0f);
    check_backward(shape, DType::BF16, /*with_residual=*/true, DxStorage::Residual, 1.0f);
  }
}

TEST_F(NormGpu, ForwardInPlace) {
  SCOPED_TRACE(seed());
  const Tensor x = random_gpu({9, 2048}), weight = random_weight(2048);
  const Tensor expected = ops::rms_norm_forward(to_cpu_f32(x), to_cpu_f32(weight), kEps);
  ops::cuda::rms_norm_forward(x, weight, kEps, x);
  EXPECT_LT(relative_error(x, expected), kBf16Tolerance);
}

TEST_F(NormGpu, BackwardMatchesCpu) {
  SCOPED_TRACE(seed());
  // 600 and 1100 rows: more rows than the backward has blocks, so blocks accumulate several rows each.
  for (const Shape& shape : std::vector<Shape>{{600, 2048}, {1100, 70}, {13, 37}, {2, 5, 64}})
    for (DType dweight_dtype : {DType::F32, DType::BF16})
      check_backward(shape, dweight_dtype, /*with_residual=*/false, DxStorage::Fresh);
}

TEST_F(NormGpu, BackwardAddsResidualIncludingIntoItself) {
  SCOPED_TRACE(seed());
  for (const Shape& shape : std::vector<Shape>{{40, 2048}, {21, 37}}) {
    check_backward(shape, DType::F32, /*with_residual=*/true, DxStorage::Fresh);
    check_backward(shape, DType::BF16, /*with_residual=*/true, DxStorage::Residual);
    check_backward(shape, DType::F32, /*with_residual=*/false, DxStorage::Dy);
  }
}

TEST_F(NormGpu, BackwardIsDeterministic) {
  SCOPED_TRACE(seed());
  const Shape shape{3000, 70};
  const Tensor dy = random_gpu(shape), x = random_gpu(shape), weight = random_weight(70);
  const Tensor initial = random_gpu({70}, DType::F32);
  std::vector<std::vector<char>> results;
  for (int run = 0; run < 2; ++run) {
    const Tensor dweight = initial.clone();
    const Tensor dx = poisoned(shape, DType::BF16, Device::cuda());
    ops::cuda::rms_norm_backward(dy, x, weight, kEps, dx, dweight);
    results.push_back(bytes_of(dweight));
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST_F(NormGpu, NoRowsWritesNothing) {
  SCOPED_TRACE(seed());
  const Tensor x = random_gpu({0, 64}), weight = random_weight(64), dweight = random_gpu({64}, DType::F32);
  const std::vector<char> before = bytes_of(dweight);
  ops::cuda::rms_norm_forward(x, weight, kEps, Tensor::empty({0, 64}, DType::BF16, Device::cuda()));
  ops::cuda::rms_norm_backward(x, x, weight, kEps, Tensor::empty({0, 64}, DType::BF16, Device::cuda()), dweight);
  EXPECT_EQ(bytes_of(dweight), before);
}

TEST_F(NormGpu, BadArgumentsAreErrors) {
  const Tensor x = random_gpu({4, 64}), weight = random_weight(64);
  EXPECT_THROW(ops::cuda::rms_norm_forward(x, random_weight(32), kEps, poisoned({4, 64}, DType::BF16, Device::cuda())),
               Error);
  EXPECT_THROW(ops::cuda::rms_norm_forward(x, weight, kEps, poisoned({4, 64}, DType::F32, Device::cuda())), Error);
  EXPECT_THROW(ops::cuda::rms_norm_forward(to_cpu_f32(x), weight, kEps, poisoned({4, 64}, DType::BF16, Device::cuda())),
               Error);
}

// ---------------------------------------------------------------------------------------------------------------
// Attention prep: split, q/k norm, RoPE

class QkvRopeGpu : public PointwiseGpuTest {
 protected:
  struct Case {
    int64_t tokens, q_heads, kv_heads, head_dim;
    bool with_norms;
    bool with_rope = true;  // false: no inv_freq (Nemotron-H's attention), the split and the norms alone
    // The schedule (default RoPE at theta 1e6 when empty) and the rotating pairs' scale (longrope's attention factor
    // on partially rotated heads, Phi-4-mini's).
    std::optional<ops::RopeSpec> rope;
    double rotated_scale = 1.0;
    float norm_offset = 0.0f;  // Gemma's norms: 1 + weight
  };

  void run(const Case& c) {
    SCOPED_TRACE(::testing::Message() << "T " << c.tokens << " nq " << c.q_heads << " nkv " << c.kv_heads << " d "
                                      << c.head_dim << " norms " << c.with_norms << " rope " << c.with_rope);
    const int64_t heads = c.q_heads + 2 * c.kv_heads, d = c.head_dim;
    const Tensor qkv = random_gpu({c.tokens, heads * d});
    const Tensor q_norm = c.with_norms ? random_weight(d) : Tensor();
    const Tensor k_norm = c.with_norms ? random_weight(d) : Tensor();
    const std::vector<float> inv = ops::rope_inverse_frequencies(
        c.rope.value_or(ops::RopeSpec{.type = c.with_rope ? "default" : "none", .theta = 1e6}), d);
    std::vector<int64_t> positions(static_cast<size_t>(c.tokens));
    std::vector<int32_t> positions_i32(static_cast<size_t>(c.tokens));
    std::uniform_int_distribution<int32_t> position_of(0, 16383);
    for (size_t t = 0; t < positions.size(); ++t) positions[t] = positions_i32[t] = position_of(rng());
    const Tensor inv_gpu = c.with_rope ? Tensor::from_vector(inv, {d / 2}).to(Device::cuda()) : Tensor();
    const Tensor positions_gpu = upload_i32(positions_i32);

    // Forward.
    const Tensor q = poisoned({c.tokens, c.q_heads, d}, DType::BF16, Device::cuda());
    const Tensor k = poisoned({c.tokens, c.kv_heads, d}, DType::BF16, Device::cuda());
    const Tensor v = poisoned({c.tokens, c.kv_heads, d}, DType::BF16, Device::cuda());
    ops::cuda::qkv_norm_rope_forward(qkv, q_norm, k_norm, kEps, inv_gpu, positions_gpu, q, k, v, c.rotated_scale,
                                     c.norm_offset);

    const Tensor qkv32 = to_cpu_f32(qkv);
    const Tensor x_q = heads_of(qkv32, heads, 0, c.q_heads, d);
    const Tensor x_k = heads_of(qkv32, heads, c.q_heads, c.kv_heads, d);
    const Tensor x_v = heads_of(qkv32, heads, c.q_heads + c.kv_heads, c.kv_heads, d);
    Tensor expected_q =
        c.with_norms ? ops::rms_norm_forward(x_q, to_cpu_f32(q_norm), kEps, c.norm_offset) : x_q.clone();
    Tensor expected_k =
        c.with_norms ? ops::rms_norm_forward(x_k, to_cpu_f32(k_norm), kEps, c.norm_offset) : x_k.clone();
    ops::apply_rope(expected_q, inv, positions, false, c.rotated_scale);
    ops::apply_rope(expected_k, inv, positions, false, c.rotated_scale);
    EXPECT_LT(relative_error(q, expected_q), kBf16Tolerance);
    EXPECT_LT(relative_error(k, expected_k), kBf16Tolerance);
    EXPECT_LT(relative_error(v, x_v), kBf16Tolerance);
    EXPECT_EQ(bytes_of(v), bytes_of(ops::cast(x_v, DType::BF16)));  // a copy, exact

    // Backward, with the norm gradients (when there are norms) accumulating into F32 for q and BF16 for k.
    const Tensor dq = random_gpu({c.tokens, c.q_heads, d});
    const Tensor dk = random_gpu({c.tokens, c.kv_heads, d});
    const Tensor dv = random_gpu({c.tokens, c.kv_heads, d});
    const Tensor dq_norm = c.with_norms ? random_gpu({d}, DType::F32) : Tensor();
    const Tensor dk_norm = c.with_norms ? random_gpu({d}, DType::BF16) : Tensor();
    Tensor expected_dq_norm = c.with_norms ? to_cpu_f32(dq_norm) : Tensor();
    Tensor expected_dk_norm = c.with_norms ? to_cpu_f32(dk_norm) : Tensor();
    const Tensor dqkv = poisoned({c.tokens, heads * d}, DType::BF16, Device::cuda());
    ops::cuda::qkv_norm_rope_backward(dq, dk, dv, qkv, q_norm, k_norm, kEps, inv_gpu, positions_gpu, dqkv, dq_norm,
                                      dk_norm, c.rotated_scale, c.norm_offset);

    Tensor grad_q = to_cpu_f32(dq), grad_k = to_cpu_f32(dk);
    ops::apply_rope(grad_q, inv, positions, /*inverse=*/true, c.rotated_scale);
    ops::apply_rope(grad_k, inv, positions, /*inverse=*/true, c.rotated_scale);
    if (c.with_norms) {
      grad_q = ops::rms_norm_backward(grad_q, x_q, to_cpu_f32(q_norm), kEps, expected_dq_norm, c.norm_offset);
      grad_k = ops::rms_norm_backward(grad_k, x_k, to_cpu_f32(k_norm), kEps, expected_dk_norm, c.norm_offset);
    }
    Tensor expected_dqkv = Tensor::zeros({c.tokens, heads * d}, DType::F32);
    put_heads(expected_dqkv, heads, 0, grad_q);
    put_heads(expected_dqkv, heads, c.q_heads, grad_k);
    put_heads(expected_dqkv, heads, c.q_heads + c.kv_heads, to_cpu_f32(dv));
    EXPECT_LT(relative_error(dqkv, expected_dqkv), kBf16Tolerance);
    if (c.with_norms) {
      EXPECT_LT(relative_error(dq_norm, expected_dq_norm), kBf16Tolerance);
      EXPECT_LT(relative_error(dk_norm, expected_dk_norm), kBf16Tolerance);
    }
  }

  // Heads [first, first + count) of an F32 CPU [T, heads·d] tensor, as [T, count, d].
  static Tensor heads_of(const Tensor& qkv32, int64_t heads, int64_t first, int64_t count, int64_t d) {
    const int64_t tokens = qkv32.size(0);
    Tensor out = Tensor::empty({tokens, count, d}, DType::F32);
    for (int64_t t = 0; t < tokens; ++t)
      std::memcpy(out.data<float>() + t * count * d, qkv32.data<float>() + (t * heads + first) * d,
                  size_t(count * d) * sizeof(float));
    return out;
  }
  static void put_heads(Tensor& qkv32, int64_t heads, int64_t first, const Tensor& part) {
    const int64_t tokens = qkv32.size(0), count = part.size(1), d = part.size(2);
    for (int64_t t = 0; t < tokens; ++t)
      std::memcpy(qkv32.data<float>() + (t * heads + first) * d, part.data<float>() + t * count * d,
                  size_t(count * d) * sizeof(float));
  }
};

TEST_F(QkvRopeGpu, WithQkNormsMatchesCpu) {
  SCOPED_TRACE(seed());
  run({.tokens = 37, .q_heads = 4, .kv_heads = 2, .head_dim = 64, .with_norms = true});
  run({.tokens = 19, .q_heads = 8, .kv_heads = 1, .head_dim = 128, .with_norms = true});
  // Enough (token, head) pairs that the backward's fixed grid gives each warp several heads.
  run({.tokens = 1500, .q_heads = 4, .kv_heads = 2, .head_dim = 64, .with_norms = true});
}

// Gemma 3's q/k norms scale by 1 + weight (its head_dim 256, and a small one on the scalar path).
TEST_F(QkvRopeGpu, OffsetNormsMatchCpu) {
  SCOPED_TRACE(seed());
  run({.tokens = 37, .q_heads = 4, .kv_heads = 1, .head_dim = 256, .with_norms = true, .norm_offset = 1.0f});
  run({.tokens = 700, .q_heads = 4, .kv_heads = 2, .head_dim = 8, .with_norms = true, .norm_offset = 1.0f});
  run({.tokens = 11, .q_heads = 3, .kv_heads = 1, .head_dim = 6, .with_norms = true, .norm_offset = 1.0f});
}

TEST_F(QkvRopeGpu, WithoutNormsMatchesCpu) {
  SCOPED_TRACE(seed());
  run({.tokens = 37, .q_heads = 4, .kv_heads = 2, .head_dim = 64, .with_norms = false});
  run({.tokens = 5, .q_heads = 2, .kv_heads = 2, .head_dim = 128, .with_norms = false});
}

// Nemotron-H: no inv_freq, so q and k are split off (and normed) without any rotation; without norms they are
// exact copies.
TEST_F(QkvRopeGpu, WithoutRopeMatchesCpu) {
  SCOPED_TRACE(seed());
  run({.tokens = 37, .q_heads = 4, .kv_heads = 2, .head_dim = 64, .with_norms = false, .with_rope = false});
  run({.tokens = 13, .q_heads = 4, .kv_heads = 2, .head_dim = 8, .with_norms = true, .with_rope = false});
  run({.tokens = 11, .q_heads = 3, .kv_heads = 1, .head_dim = 6, .with_norms = false, .with_rope = false});
}

TEST_F(QkvRopeGpu, OddHalfHeadDimTakesTheScalarPath) {
  SCOPED_TRACE(seed());
  run({.tokens = 11, .q_heads = 3, .kv_heads = 1, .head_dim = 6, .with_norms = true});
  run({.tokens = 11, .q_heads = 3, .kv_heads = 1, .head_dim = 70, .with_norms = false});
}

// Phi-4-mini: longrope's short factors over three quarters of each head, the rotating pairs' cos and sin times the
// attention factor, the passing pairs (zero frequency) as they are, forward and backward; the whole-head longrope
// with a scale too (the kernel's factor, which the attention otherwise folds into its softmax scale).
TEST_F(QkvRopeGpu, LongropeScalesOnlyTheRotatingPairs) {
  SCOPED_TRACE(seed());
  ops::RopeSpec rope{.type = "longrope", .theta = 10000.0, .partial_rotary_factor = 0.75};
  for (int i = 0; i < 24; ++i) rope.short_factor.push_back(1.0 + 0.1 * i);
  run({.tokens = 37,
       .q_heads = 4,
       .kv_heads = 2,
       .head_dim = 64,
       .with_norms = false,
       .rope = rope,
       .rotated_scale = 1.19});
  run({.tokens = 23,
       .q_heads = 3,
       .kv_heads = 1,
       .head_dim = 64,
       .with_norms = true,
       .rope = rope,
       .rotated_scale = 1.19});
  rope.partial_rotary_factor = 1.0;
  rope.short_factor.resize(32, 1.5);
  run({.tokens = 19,
       .q_heads = 2,
       .kv_heads = 2,
       .head_dim = 64,
       .with_norms = false,
       .rope = rope,
       .rotated_scale = 1.07});
}

TEST_F(QkvRopeGpu, NoTokens) {
  SCOPED_TRACE(seed());
  run({.tokens = 0, .q_heads = 4, .kv_heads = 2, .head_dim = 64, .with_norms = true});
}

TEST_F(QkvRopeGpu, BackwardIsDeterministic) {
  SCOPED_TRACE(seed());
  const int64_t tokens = 2000, nq = 4, nkv = 2, d = 64, heads = nq + 2 * nkv;
  const Tensor qkv = random_gpu({tokens, heads * d}), q_norm = random_weight(d), k_norm = random_weight(d);
  const std::vector<float> inv = ops::rope_inverse_frequencies(ops::RopeSpec{}, d);
  const Tensor inv_gpu = Tensor::from_vector(inv, {d / 2}).to(Device::cuda());
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  for (size_t t = 0; t < positions.size(); ++t) positions[t] = int32_t(t % 1000);
  const Tensor positions_gpu = upload_i32(positions);
  const Tensor dq = random_gpu({tokens, nq, d}), dk = random_gpu({tokens, nkv, d}), dv = random_gpu({tokens, nkv, d});
  std::vector<std::vector<char>> results;
  for (int run = 0; run < 2; ++run) {
    const Tensor dq_norm = Tensor::zeros({d}, DType::F32).to(Device::cuda());
    const Tensor dk_norm = Tensor::zeros({d}, DType::F32).to(Device::cuda());
    const Tensor dqkv = poisoned({tokens, heads * d}, DType::BF16, Device::cuda());
    ops::cuda::qkv_norm_rope_backward(dq, dk, dv, qkv, q_norm, k_norm, kEps, inv_gpu, positions_gpu, dqkv, dq_norm,
                                      dk_norm);
    std::vector<char> all = bytes_of(dq_norm), k_bytes = bytes_of(dk_norm);
    all.insert(all.end(), k_bytes.begin(), k_bytes.end());
    results.push_back(all);
  }
  EXPECT_EQ(results[0], results[1]);
}

// ---------------------------------------------------------------------------------------------------------------
// SwiGLU

class SwigluGpu : public PointwiseGpuTest {
 protected:
  void run(const Tensor& gate_up) {
    SCOPED_TRACE(gate_up.str());
    const int64_t rows = gate_up.size(0), inner = gate_up.size(1) / 2;
    const Tensor out = poisoned({rows, inner}, DType::BF16, Device::cuda());
    ops::cuda::swiglu_forward(gate_up, out);
    const Tensor gate_up32 = to_cpu_f32(gate_up);
    EXPECT_LT(relative_error(out, ops::swiglu_forward(gate_up32)), kBf16Tolerance);

    const Tensor dout = random_gpu({rows, inner});
    const Tensor dgate_up = poisoned(gate_up.shape(), DType::BF16, Device::cuda());
    ops::cuda::swiglu_backward(dout, gate_up, dgate_up);
    EXPECT_LT(relative_error(dgate_up, ops::swiglu_backward(to_cpu_f32(dout), gate_up32)), kBf16Tolerance);

    // With the forward's output recomputed in the same pass, into a buffer of its own and over dout itself:
    // the same gradient, and the forward's output bit for bit.
    const Tensor recomputed = poisoned({rows, inner}, DType::BF16, Device::cuda());
    const Tensor dgate_up_fused = poisoned(gate_up.shape(), DType::BF16, Device::cuda());
    ops::cuda::swiglu_backward(dout, gate_up, dgate_up_fused, recomputed);
    EXPECT_EQ(bytes_of(dgate_up_fused), bytes_of(dgate_up));
    EXPECT_EQ(bytes_of(recomputed), bytes_of(out));
    const Tensor in_place = dout.clone();
    ops::cuda::swiglu_backward(in_place, gate_up, dgate_up_fused, /*recomputed=*/in_place);
    EXPECT_EQ(bytes_of(dgate_up_fused), bytes_of(dgate_up));
    EXPECT_EQ(bytes_of(in_place), bytes_of(out));
  }
};

TEST_F(SwigluGpu, MatchesCpu) {
  SCOPED_TRACE(seed());
  run(random_gpu({33, 2 * 768}, DType::BF16, 2.0f));
  run(random_gpu({17, 2 * 37}, DType::BF16, 2.0f));
  run(random_gpu({3, 2 * 8}, DType::BF16, 2.0f));
}

TEST_F(SwigluGpu, MisalignedViewTakesTheScalarPath) {
  SCOPED_TRACE(seed());
  const Tensor storage = random_gpu({1 + 9 * 2 * 64}, DType::BF16, 2.0f);
  run(storage.flat_slice(1, {9, 2 * 64}));
}

TEST_F(SwigluGpu, NoRows) {
  SCOPED_TRACE(seed());
  run(random_gpu({0, 2 * 64}));
}

TEST_F(SwigluGpu, RecomputedOutputOverlappingAnythingButDoutIsRefused) {
  const Tensor gate_up = random_gpu({4, 2 * 64}), dout = random_gpu({4, 64});
  const Tensor dgate_up = poisoned(gate_up.shape(), DType::BF16, Device::cuda());
  EXPECT_THROW(ops::cuda::swiglu_backward(dout, gate_up, dgate_up, gate_up.flat_slice(0, {4, 64})), Error);
  EXPECT_THROW(ops::cuda::swiglu_backward(dout, gate_up, dgate_up, dgate_up.flat_slice(0, {4, 64})), Error);
  EXPECT_THROW(ops::cuda::swiglu_backward(dout, gate_up, dgate_up, dout.flat_slice(64, {3, 64})), Error);  // shifted
  EXPECT_THROW(ops::cuda::swiglu_backward(dout, gate_up, dgate_up, poisoned({4, 32}, DType::BF16, Device::cuda())),
               Error);
}

// The gated MLPs' other gate functions (hidden_act: GeGLU and kin) against the CPU's fp32, with the recomputed
// output bit for bit the forward's, on the vectorised and the scalar path.
TEST_F(SwigluGpu, EveryGateFunctionMatchesCpu) {
  SCOPED_TRACE(seed());
  for (const ops::GateFunction gate : {ops::GateFunction::Silu, ops::GateFunction::Gelu, ops::GateFunction::GeluTanh,
                                       ops::GateFunction::QuickGelu, ops::GateFunction::Relu})
    for (const int64_t inner : {int64_t(768), int64_t(37)}) {
      SCOPED_TRACE(std::string(ops::gate_function_name(gate)) + ", inner " + std::to_string(inner));
      const int64_t rows = 19;
      const Tensor gate_up = random_gpu({rows, 2 * inner}, DType::BF16, 2.0f);
      const Tensor gate_up32 = to_cpu_f32(gate_up);
      const Tensor out = poisoned({rows, inner}, DType::BF16, Device::cuda());
      ops::cuda::gated_forward(gate_up, gate, out);
      EXPECT_LT(relative_error(out, ops::gated_forward(gate_up32, gate)), kBf16Tolerance);
      const Tensor dout = random_gpu({rows, inner});
      const Tensor dgate_up = poisoned(gate_up.shape(), DType::BF16, Device::cuda());
      const Tensor recomputed = poisoned({rows, inner}, DType::BF16, Device::cuda());
      ops::cuda::gated_backward(dout, gate_up, gate, dgate_up, recomputed);
      EXPECT_LT(relative_error(dgate_up, ops::gated_backward(to_cpu_f32(dout), gate_up32, gate)), kBf16Tolerance);
      EXPECT_EQ(bytes_of(recomputed), bytes_of(out));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// relu² (Nemotron-H's MLPs and experts): elementwise, no gate

class ReluSquaredGpu : public PointwiseGpuTest {
 protected:
  void run(const Tensor& x) {
    SCOPED_TRACE(x.str());
    const Tensor out = poisoned(x.shape(), DType::BF16, Device::cuda());
    ops::cuda::relu_squared_forward(x, out);
    const Tensor x32 = to_cpu_f32(x);
    EXPECT_LT(relative_error(out, ops::relu_squared_forward(x32)), kBf16Tolerance);

    const Tensor dout = random_gpu(x.shape());
    const Tensor dx = poisoned(x.shape(), DType::BF16, Device::cuda());
    ops::cuda::relu_squared_backward(dout, x, dx);
    EXPECT_LT(relative_error(dx, ops::relu_squared_backward(to_cpu_f32(dout), x32)), kBf16Tolerance);
  }
};

TEST_F(ReluSquaredGpu, MatchesCpu) {
  SCOPED_TRACE(seed());
  run(random_gpu({33, 768}, DType::BF16, 2.0f));
  run(random_gpu({17, 37}, DType::BF16, 2.0f));
  run(random_gpu({3, 8}, DType::BF16, 2.0f));
}

TEST_F(ReluSquaredGpu, MisalignedViewTakesTheScalarPath) {
  SCOPED_TRACE(seed());
  const Tensor storage = random_gpu({1 + 9 * 64}, DType::BF16, 2.0f);
  run(storage.flat_slice(1, {9, 64}));
}

TEST_F(ReluSquaredGpu, NoRowsAndBadArguments) {
  SCOPED_TRACE(seed());
  run(random_gpu({0, 64}));
  const Tensor x = random_gpu({4, 64});
  EXPECT_THROW(ops::cuda::relu_squared_forward(x, poisoned({4, 32}, DType::BF16, Device::cuda())), Error);
  EXPECT_THROW(ops::cuda::relu_squared_backward(x, x, x), Error);  // dx overlaps the inputs
}

// ---------------------------------------------------------------------------------------------------------------
// Embedding

class EmbeddingGpu : public PointwiseGpuTest {
 protected:
  // `count` ids drawn from [0, distinct): small `distinct` forces repeats.
  std::vector<int32_t> random_ids(int64_t count, int32_t distinct) {
    std::uniform_int_distribution<int32_t> id_of(0, distinct - 1);
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (int32_t& id : ids) id = id_of(rng());
    return ids;
  }
  static Tensor ids_i64(const std::vector<int32_t>& ids) {
    return Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {int64_t(ids.size())});
  }
};

TEST_F(EmbeddingGpu, ForwardMatchesCpu) {
  SCOPED_TRACE(seed());
  for (int64_t hidden : {2048, 37, 8}) {
    SCOPED_TRACE(hidden);
    const int64_t vocab = 50;
    const std::vector<int32_t> ids = random_ids(101, int32_t(vocab));
    const Tensor table = random_gpu({vocab, hidden});
    const Tensor out = poisoned({int64_t(ids.size()), hidden}, DType::BF16, Device::cuda());
    ops::cuda::embedding_forward(upload_i32(ids), table, out);
    const Tensor expected = ops::embedding_forward(ids_i64(ids), to_cpu_f32(table));
    EXPECT_LT(relative_error(out, expected), kBf16Tolerance);
    EXPECT_EQ(bytes_of(out), bytes_of(ops::cast(expected, DType::BF16)));  // a copy, exact
  }
}

TEST_F(EmbeddingGpu, ForwardOutOfRangeIdsGiveZeroRows) {
  SCOPED_TRACE(seed());
  const int64_t vocab = 10, hidden = 64;
  const std::vector<int32_t> ids{3, -1, 10, 9, 2147483647, 0};
  const Tensor table = random_gpu({vocab, hidden});
  const Tensor out = poisoned({int64_t(ids.size()), hidden}, DType::BF16, Device::cuda());
  ops::cuda::embedding_forward(upload_i32(ids), table, out);
  const Tensor table32 = to_cpu_f32(table);
  Tensor expected = Tensor::zeros({int64_t(ids.size()), hidden}, DType::F32);
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] >= 0 && ids[t] < vocab)
      std::memcpy(expected.data<float>() + int64_t(t) * hidden, table32.data<float>() + ids[t] * hidden,
                  size_t(hidden) * sizeof(float));
  EXPECT_EQ(bytes_of(out), bytes_of(ops::cast(expected, DType::BF16)));
}

TEST_F(EmbeddingGpu, BackwardWithRepeatedIdsMatchesCpuAndTouchesOnlyReadRows) {
  SCOPED_TRACE(seed());
  for (int64_t hidden : {2048, 37}) {
    for (DType dtable_dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(::testing::Message() << "H " << hidden << " dtable " << dtype_name(dtable_dtype));
      const int64_t vocab = 300;
      // 700 positions over 40 distinct ids (each repeated ~17 times), in a table of 300 rows: most rows unread.
      const std::vector<int32_t> ids = random_ids(700, 40);
      const Tensor dout = random_gpu({int64_t(ids.size()), hidden});
      const Tensor dtable = random_gpu({vocab, hidden}, dtable_dtype);
      const Tensor before = dtable.to(Device::cpu());
      Tensor expected = to_cpu_f32(dtable);
      ops::embedding_backward(to_cpu_f32(dout), ids_i64(ids), expected);

      ops::cuda::embedding_backward(dout, upload_i32(ids), dtable);
      EXPECT_LT(relative_error(dtable, expected), kBf16Tolerance);
      const Tensor after = dtable.to(Device::cpu());
      const size_t row_bytes = size_t(hidden) * dtype_size(dtable_dtype);
      for (int64_t id = 0; id < vocab; ++id) {
        if (std::find(ids.begin(), ids.end(), int32_t(id)) != ids.end()) continue;
        EXPECT_EQ(std::memcmp(static_cast<const char*>(before.raw_data()) + id * row_bytes,
                              static_cast<const char*>(after.raw_data()) + id * row_bytes, row_bytes),
                  0)
            << "row " << id << " was never read but changed";
      }
    }
  }
}

TEST_F(EmbeddingGpu, BackwardOneIdEverywhereAndOutOfRangeIdsSkipped) {
  SCOPED_TRACE(seed());
  const int64_t vocab = 8, hidden = 70;
  std::vector<int32_t> ids(2000, 5);  // a padding id on every position: one long run
  ids[7] = -3;
  ids[1999] = int32_t(vocab);
  std::vector<int32_t> valid_ids = ids;
  valid_ids[7] = valid_ids[1999] = 0;  // for the reference: rows whose dout is zeroed below contribute nothing
  Tensor dout32 = to_cpu_f32(random_gpu({int64_t(ids.size()), hidden}));
  for (int64_t t : {7, 1999}) std::fill_n(dout32.data<float>() + t * hidden, hidden, 0.0f);
  const Tensor dout = ops::cast(dout32, DType::BF16).to(Device::cuda());
  const Tensor dtable = random_gpu({vocab, hidden}, DType::F32);
  Tensor expected = to_cpu_f32(dtable);
  ops::embedding_backward(to_cpu_f32(dout), ids_i64(valid_ids), expected);
  ops::cuda::embedding_backward(dout, upload_i32(ids), dtable);
  EXPECT_LT(relative_error(dtable, expected), kBf16Tolerance);
}

// nn.Embedding's padding_idx: positions holding the padding row add nothing to it (the same bits as the CPU op
// told the same); every other row as without it, and the padding row keeps what it held.
TEST_F(EmbeddingGpu, BackwardSkipsThePaddingRow) {
  SCOPED_TRACE(seed());
  const int64_t vocab = 16, hidden = 64, padding_row = 3;
  std::vector<int32_t> ids = random_ids(512, vocab);
  for (size_t t = 0; t < ids.size(); t += 5) ids[t] = int32_t(padding_row);
  const Tensor dout = random_gpu({int64_t(ids.size()), hidden});
  const Tensor initial = random_gpu({vocab, hidden}, DType::F32);
  Tensor expected = to_cpu_f32(initial);
  ops::embedding_backward(to_cpu_f32(dout), ids_i64(ids), expected, padding_row);
  const Tensor dtable = initial.clone();
  ops::cuda::embedding_backward(dout, upload_i32(ids), dtable, padding_row);
  EXPECT_LT(relative_error(dtable, expected), kBf16Tolerance);
  const Tensor before = initial.to(Device::cpu()), after = dtable.to(Device::cpu());
  EXPECT_EQ(std::memcmp(before.data<float>() + padding_row * hidden, after.data<float>() + padding_row * hidden,
                        size_t(hidden) * sizeof(float)),
            0);
  const Tensor unpadded = initial.clone();
  ops::cuda::embedding_backward(dout, upload_i32(ids), unpadded);
  const Tensor other = unpadded.to(Device::cpu());
  for (int64_t id = 0; id < vocab; ++id) {
    if (id == padding_row) continue;
    EXPECT_EQ(std::memcmp(other.data<float>() + id * hidden, after.data<float>() + id * hidden,
                          size_t(hidden) * sizeof(float)),
              0)
        << "row " << id;
  }
}

TEST_F(EmbeddingGpu, BackwardIsDeterministic) {
  SCOPED_TRACE(seed());
  const std::vector<int32_t> ids = random_ids(4096, 16);
  const Tensor dout = random_gpu({4096, 128}), initial = random_gpu({64, 128}, DType::F32);
  std::vector<std::vector<char>> results;
  for (int run = 0; run < 2; ++run) {
    const Tensor dtable = initial.clone();
    ops::cuda::embedding_backward(dout, upload_i32(ids), dtable);
    results.push_back(bytes_of(dtable));
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST_F(EmbeddingGpu, NoTokens) {
  SCOPED_TRACE(seed());
  const Tensor table = random_gpu({10, 64}), dtable = random_gpu({10, 64}, DType::F32);
  const std::vector<char> before = bytes_of(dtable);
  const Tensor no_ids = Tensor::empty({0}, DType::I32, Device::cuda());
  ops::cuda::embedding_forward(no_ids, table, Tensor::empty({0, 64}, DType::BF16, Device::cuda()));
  ops::cuda::embedding_backward(Tensor::empty({0, 64}, DType::BF16, Device::cuda()), no_ids, dtable);
  EXPECT_EQ(bytes_of(dtable), before);
}

// ---------------------------------------------------------------------------------------------------------------
// Elementwise sums

class ElementwiseGpu : public PointwiseGpuTest {};

// a + b_scale · b, in fp32 (b undefined: a_scale · a alone).
Tensor cpu_sum(const Tensor& a32, const Tensor& b32, float b_scale = 1.0f, float a_scale = 1.0f) {
  Tensor out = a32.clone();
  for (int64_t i = 0; i < out.numel(); ++i)
    out.data<float>()[i] = a_scale * out.data<float>()[i] + (b32.defined() ? b_scale * b32.data<float>()[i] : 0.0f);
  return out;
}

double tolerance_of(DType dtype) { return dtype == DType::F32 ? kF32Tolerance : kBf16Tolerance; }

TEST_F(ElementwiseGpu, AddMatchesCpu) {
  SCOPED_TRACE(seed());
  for (DType dtype : {DType::BF16, DType::F32}) {
    for (int64_t n : {1000003, 4096, 13, 1}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n " << n);
      const Tensor a = random_gpu({n}, dtype), b = random_gpu({n}, dtype);
      const Tensor out = poisoned({n}, dtype, Device::cuda());
      ops::cuda::add(a, b, out);
      EXPECT_LT(relative_error(out, cpu_sum(to_cpu_f32(a), to_cpu_f32(b))), tolerance_of(dtype));
    }
  }
}

TEST_F(ElementwiseGpu, AddInPlaceAndMisaligned) {
  SCOPED_TRACE(seed());
  for (DType dtype : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor a = random_gpu({77, 70}, dtype), b = random_gpu({77, 70}, dtype);
    Tensor expected = cpu_sum(to_cpu_f32(a), to_cpu_f32(b));
    ops::cuda::add(a, b, a);  // out is a
    EXPECT_LT(relative_error(a, expected), tolerance_of(dtype));
    expected = cpu_sum(to_cpu_f32(a), to_cpu_f32(b));
    ops::cuda::add(a, b, b);  // out is b
    EXPECT_LT(relative_error(b, expected), tolerance_of(dtype));

    const Tensor storage = random_gpu({1 + 999}, dtype);
    const Tensor misaligned = storage.flat_slice(1, {999});
    const Tensor other = random_gpu({999}, dtype), out = poisoned({999}, dtype, Device::cuda());
    ops::cuda::add(misaligned, other, out);
    EXPECT_LT(relative_error(out, cpu_sum(to_cpu_f32(misaligned), to_cpu_f32(other))), tolerance_of(dtype));
  }
}

// Granite's residual multiplier: h + s · mixed forward, s · d(out) backward (model/cuda/sublayer_norm.h), over
// the vector path, the scalar tail and a misaligned view, in place too.
TEST_F(ElementwiseGpu, ScaledAddAndScaleMatchCpu) {
  SCOPED_TRACE(seed());
  for (DType dtype : {DType::BF16, DType::F32}) {
    for (int64_t n : {4099, 13}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n " << n);
      const Tensor a = random_gpu({n}, dtype), b = random_gpu({n}, dtype);
      const Tensor out = poisoned({n}, dtype, Device::cuda());
      ops::cuda::add(a, b, out, 0.22f);
      EXPECT_LT(relative_error(out, cpu_sum(to_cpu_f32(a), to_cpu_f32(b), 0.22f)), tolerance_of(dtype));
      const Tensor scaled = poisoned({n}, dtype, Device::cuda());
      ops::cuda::scale(a, 0.125f, scaled);
      EXPECT_LT(relative_error(scaled, cpu_sum(to_cpu_f32(a), Tensor(), 0.0f, 0.125f)), tolerance_of(dtype));
      const Tensor expected = cpu_sum(to_cpu_f32(b), Tensor(), 0.0f, -3.0f);
      ops::cuda::scale(b, -3.0f, b);  // in place
      EXPECT_LT(relative_error(b, expected), tolerance_of(dtype));
    }
    const Tensor storage = random_gpu({1 + 999}, dtype);
    const Tensor misaligned = storage.flat_slice(1, {999});
    const Tensor other = random_gpu({999}, dtype), out = poisoned({999}, dtype, Device::cuda());
    ops::cuda::add(other, misaligned, out, 8.0f);
    EXPECT_LT(relative_error(out, cpu_sum(to_cpu_f32(other), to_cpu_f32(misaligned), 8.0f)), tolerance_of(dtype));
  }
}

}  // namespace
}  // namespace moetune
