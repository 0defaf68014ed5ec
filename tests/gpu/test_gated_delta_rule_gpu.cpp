// The Gated DeltaNet recurrence's GPU kernels (ops/cuda/gated_delta_rule.h) against the CPU op (ops/gated_delta_rule.h)
// on fp32 copies of the same bf16 inputs. q, k, v are read as column blocks of one conv output and a, b of one
// in_proj output, as the mixer lays them out; outputs start poisoned. Cases cover Hv = Hk, 2·Hk and 4·Hk, head dims
// that pad (16, 24, 48) up to 256, documents starting inside the backward's 64-row segments, on their boundaries and
// in consecutive rows, row counts not multiples of any tile, BF16 and F32 parameters and gradients, frozen ones,
// generation's state, the backward's column blocks and many 64-row segments, and bit-equal repeated backward passes.
// DISABLED_QwenNextWidths prints the timings.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "column_block_test.h"
#include "gpu_test_util.h"
#include "gpu_timing.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/model/block_util.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/gated_delta_rule.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/gated_delta_rule.h"

namespace moetune {
namespace {

using ops::cuda::ColumnBlock;
using testing::cpu_block;
using testing::kBf16Tolerance;
using testing::mean_gpu_ms;
using testing::poisoned;
using testing::relative_error;
using testing::to_cpu_f32;

struct Case {
  int64_t rows, k_heads, v_heads, k_dim, v_dim;
  std::vector<int64_t> starts;  // besides row 0
  DType params = DType::BF16, grads = DType::F32;
  bool frozen = false;  // d(dt_bias) and d(A_log) undefined
};

class GatedDeltaRuleGpu : public testing::ColumnBlockGpuTest {
 protected:
  // The op's operands as the mixer holds them: q, k, v side by side in the conv's output (columns offset by `pad`),
  // a and b inside in_proj's output.
  struct Operands {
    ops::cuda::GatedDeltaBlocks gpu;
    ops::GatedDeltaInputs cpu;
    Tensor dt_bias, a_log;  // GPU, the case's dtype
    ops::GatedDeltaParams cpu_params;
    ops::GatedDeltaShape shape;
    ops::DocumentStarts starts;
    Tensor starts_gpu;
    std::vector<int64_t> split_rows;  // every start: the walks split where the kernels choose
  };

  Operands operands(const Case& c) {
    Operands o;
    o.shape = {c.k_heads, c.v_heads, c.k_dim, c.v_dim};
    const int64_t qk = c.k_heads * c.k_dim, vw = c.v_heads * c.v_dim, pad = 3;
    const Tensor conv = random_gpu({c.rows, pad + 2 * qk + vw + 1});
    const Tensor projected = random_gpu({c.rows, 2 * c.v_heads + 5});
    o.gpu = {{conv, pad, qk},
             {conv, pad + qk, qk},
             {conv, pad + 2 * qk, vw},
             {projected, 1, c.v_heads},
             {projected, 1 + c.v_heads, c.v_heads}};
    o.cpu = {cpu_block(o.gpu.q), cpu_block(o.gpu.k), cpu_block(o.gpu.v), cpu_block(o.gpu.a), cpu_block(o.gpu.b)};
    // transformers' init: A_log = log(uniform(1, 16)), dt_bias = softplus⁻¹(dt) with dt log-uniform in [1e-3, 0.1];
    // a few heads decay hard (dt near 1).
    std::vector<float> dt_bias(size_t(c.v_heads)), a_log(size_t(c.v_heads));
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (int64_t h = 0; h < c.v_heads; ++h) {
      const float dt = h % 3 == 2 ? 1.0f : std::exp(std::log(1e-3f) + unit(rng()) * (std::log(0.1f) - std::log(1e-3f)));
      dt_bias[size_t(h)] = dt + std::log(-std::expm1(-dt));
      a_log[size_t(h)] = std::log(1.0f + 15.0f * unit(rng()));
    }
    auto upload = [&](const std::vector<float>& v) {
      return ops::cast(Tensor::from_vector(v, {int64_t(v.size())}), c.params).to(Device::cuda());
    };
    o.dt_bias = upload(dt_bias);
    o.a_log = upload(a_log);
    o.cpu_params = {to_cpu_f32(o.dt_bias), to_cpu_f32(o.a_log)};
    o.starts.assign(size_t(c.rows), 0);
    o.starts[0] = 1;
    for (int64_t n : c.starts)
      if (n < c.rows) o.starts[size_t(n)] = 1;
    o.starts_gpu = ops::cuda::upload_row_flags(o.starts);
    o.split_rows = ops::document_start_rows(o.starts);
    return o;
  }

  // Gradient blocks laid out as the mixer's: dq, dk, dv side by side, da and db in one in_proj gradient.
  ops::cuda::GatedDeltaBlocks poisoned_grads(const Case& c) {
    const int64_t qk = c.k_heads * c.k_dim, vw = c.v_heads * c.v_dim;
    const Tensor dconv = poisoned({c.rows, 2 * qk + vw + 4}, DType::BF16, Device::cuda());
    const Tensor dprojected = poisoned({c.rows, 2 * c.v_heads + 2}, DType::BF16, Device::cuda());
    return {{dconv, 0, qk},
            {dconv, qk, qk},
            {dconv, 2 * qk, vw},
            {dprojected, 2, c.v_heads},
            {dprojected, 2 + c.v_heads, c.v_heads}};
  }

  // The forward pass and one backward pass into fresh gradients, copied to the CPU for comparing bits: out, dq / dk /
  // dv (one tensor), da / db (another), d(dt_bias), d(A_log).
  static constexpr const char* kOutputNames[] = {"out", "dq, dk, dv", "da, db", "d dt_bias", "d A_log"};
  std::vector<Tensor> pass_outputs(const Case& c, const Operands& o, const ColumnBlock& dout,
                                   std::span<const int64_t> split_rows) {
    const ColumnBlock out = poisoned_block(c.rows, c.v_heads * c.v_dim, 0);
    ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, o.a_log, o.shape, o.starts_gpu, out, Tensor(), split_rows);
    const ops::cuda::GatedDeltaBlocks grads = poisoned_grads(c);
    const Tensor d_dt_bias = Tensor::zeros({c.v_heads}, DType::F32, Device::cuda());
    const Tensor d_a_log = Tensor::zeros({c.v_heads}, DType::F32, Device::cuda());
    ops::cuda::gated_delta_rule_backward(dout, o.gpu, o.dt_bias, o.a_log, o.shape, o.starts_gpu, grads, d_dt_bias,
                                         d_a_log, split_rows);
    return {out.tensor.to(Device::cpu()), grads.q.tensor.to(Device::cpu()), grads.a.tensor.to(Device::cpu()),
            d_dt_bias.to(Device::cpu()), d_a_log.to(Device::cpu())};
  }

  static void expect_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].same_bytes(b[i])) << kOutputNames[i];
  }

  void check(const Case& c) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.k_heads << " key heads of " << c.k_dim << ", "
                                      << c.v_heads << " value heads of " << c.v_dim);
    const Operands o = operands(c);
    const ColumnBlock out = poisoned_block(c.rows, c.v_heads * c.v_dim, 1);
    ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, o.a_log, o.shape, o.starts_gpu, out, Tensor(), o.split_rows);
    const Tensor expected = ops::gated_delta_rule_forward(o.cpu, o.cpu_params, o.shape, o.starts);
    EXPECT_LT(relative_error(cpu_block(out), expected), kBf16Tolerance) << "out";

    const ColumnBlock dout = {random_gpu({c.rows, c.v_heads * c.v_dim + 2}), 2, c.v_heads * c.v_dim};
    const Tensor d_dt_bias = c.frozen ? Tensor() : random_gpu({c.v_heads}, 1.0f, c.grads);
    const Tensor d_a_log = c.frozen ? Tensor() : random_gpu({c.v_heads}, 1.0f, c.grads);
    const ops::GatedDeltaParams expected_dparams{c.frozen ? Tensor() : to_cpu_f32(d_dt_bias),
                                                 c.frozen ? Tensor() : to_cpu_f32(d_a_log)};
    const ops::GatedDeltaInputs expected_grads =
        ops::gated_delta_rule_backward(cpu_block(dout), o.cpu, o.cpu_params, o.shape, o.starts, expected_dparams);
    const ops::cuda::GatedDeltaBlocks grads = poisoned_grads(c);
    ops::cuda::gated_delta_rule_backward(dout, o.gpu, o.dt_bias, o.a_log, o.shape, o.starts_gpu, grads, d_dt_bias,
                                         d_a_log, o.split_rows);
    EXPECT_LT(relative_error(cpu_block(grads.q), expected_grads.q), kBf16Tolerance) << "dq";
    EXPECT_LT(relative_error(cpu_block(grads.k), expected_grads.k), kBf16Tolerance) << "dk";
    EXPECT_LT(relative_error(cpu_block(grads.v), expected_grads.v), kBf16Tolerance) << "dv";
    EXPECT_LT(relative_error(cpu_block(grads.a), expected_grads.a), kBf16Tolerance) << "da";
    EXPECT_LT(relative_error(cpu_block(grads.b), expected_grads.b), kBf16Tolerance) << "db";
    if (!c.frozen) {
      EXPECT_LT(relative_error(d_dt_bias, expected_dparams.dt_bias), kBf16Tolerance) << "d dt_bias";
      EXPECT_LT(relative_error(d_a_log, expected_dparams.a_log), kBf16Tolerance) << "d A_log";
    }
  }
};

TEST_F(GatedDeltaRuleGpu, SmallHeadsWithDocumentsInsideAndAcrossSegments) {
  SCOPED_TRACE(seed());
  // Hv = Hk; starts inside a tile, in consecutive rows.
  check({37, 2, 2, 16, 32, {5, 6, 20}});
  // Hv = 2·Hk, Dk > Dv; starts on the backward's 64-row segment boundaries and the row after; F32 parameters.
  check({150, 2, 4, 32, 16, {64, 65, 128}, DType::F32, DType::F32});
  // Hv = 4·Hk, dims that pad (48 → 64 rows a lane group, 24 columns); BF16 gradients; a start on the last row.
  check({200, 1, 4, 48, 24, {3, 100, 199}, DType::BF16, DType::BF16});
  // Value columns that leave warps of the last block idle (40: 5 of 8 forward warps).
  check({120, 2, 4, 64, 40, {64}});
  // Value heads of 18 columns: the tiles' columns are staged 4 at a time, and the group [16, 20) straddles Dv (loaded
  // element by element, the rest zeros). Added in session 42 after its last GPU call: not yet run on a GPU.
  check({60, 1, 2, 16, 18, {17}});
  // One row; frozen parameters.
  Case one{1, 1, 1, 16, 16, {}};
  one.frozen = true;
  check(one);
}

TEST_F(GatedDeltaRuleGpu, WideHeads) {
  SCOPED_TRACE(seed());
  // Qwen3-Next's head dims (fewer heads), documents across several segments.
  check({300, 2, 4, 128, 128, {70, 128, 129, 257}});
  // The widest key heads; value heads over two backward column blocks (256 columns).
  check({90, 1, 2, 256, 64, {40}, DType::F32, DType::BF16});
  check({70, 1, 2, 64, 256, {33}});
  // Two backward column blocks, the second with 1 of 16 warps busy (136 columns).
  check({70, 1, 1, 32, 136, {10}});
  // One long document: no start after row 0.
  check({257, 1, 2, 128, 128, {}});
}

// The backward's split: the walks' blocks of 32 value columns (4 a head at Dv = 128, 7 with one busy warp in the last
// at Dv = 200), the segment kernel's 128-column blocks (2 at Dv = 200 and 256, the second partly idle), its 16-row
// warps (2 at Dk = 32, 16 at Dk = 256), many heads, and sequences of many 64-row segments whose last row ends one
// (rows a multiple of 64) or not, with documents starting on segment boundaries, on their last rows and inside.
TEST_F(GatedDeltaRuleGpu, ColumnBlocksAndManySegments) {
  SCOPED_TRACE(seed());
  check({150, 2, 4, 64, 200, {63, 64, 127}});
  check({130, 1, 2, 256, 256, {63}, DType::F32, DType::BF16});
  check({192, 2, 4, 32, 128, {1, 191}});
  check({129, 1, 4, 128, 256, {64}});
  // Many heads and segments (Qwen3-Next's head dims, 8 value heads a key head as in Qwen3.5's widest).
  check({1100, 2, 16, 128, 128, {64, 500, 501, 1023}});
}

// Generation's prompt: the GPU forward pass continues a given state (unless row 0 starts a document) and leaves the
// state after the last row in it, as the CPU op does.
TEST_F(GatedDeltaRuleGpu, ContinuesFromItsState) {
  SCOPED_TRACE(seed());
  for (const Case& c : {Case{45, 2, 4, 32, 48, {}}, Case{45, 2, 4, 32, 48, {17}}, Case{30, 1, 2, 128, 128, {0, 9}}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.starts.size() << " starts");
    Operands o = operands(c);
    // operands() flags row 0; generation continues unless the case lists row 0 itself.
    o.starts[0] = !c.starts.empty() && c.starts[0] == 0;
    o.starts_gpu = ops::cuda::upload_row_flags(o.starts);
    const Tensor initial =
        testing::random_normal({c.v_heads, c.k_dim, c.v_dim}, DType::F32, Device::cpu(), rng(), 0.5f);
    const Tensor state_cpu = initial.clone(), state_gpu = initial.to(Device::cuda());
    const Tensor expected = ops::gated_delta_rule_forward(o.cpu, o.cpu_params, o.shape, o.starts, state_cpu);
    const ColumnBlock out = poisoned_block(c.rows, c.v_heads * c.v_dim, 0);
    // The split rows are given too: a state is carried by one walk whatever they say.
    ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, o.a_log, o.shape, o.starts_gpu, out, state_gpu,
                                        ops::document_start_rows(o.starts));
    EXPECT_LT(relative_error(cpu_block(out), expected), kBf16Tolerance) << "out";
    EXPECT_LT(relative_error(to_cpu_f32(state_gpu), state_cpu), 1e-4) << "final state";
  }
}

// Two passes over the same inputs write the same bits (no atomics; fixed summation orders).
TEST_F(GatedDeltaRuleGpu, BackwardIsDeterministic) {
  SCOPED_TRACE(seed());
  // One 128-column block; then two (Dv = 200) with many segments.
  for (const Case& c : {Case{333, 2, 4, 128, 96, {100, 200}}, Case{700, 2, 8, 64, 200, {64, 300}}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, value heads of " << c.v_dim);
    const Operands o = operands(c);
    const ColumnBlock dout = random_gpu({c.rows, c.v_heads * c.v_dim});
    expect_same_bits(pass_outputs(c, o, dout, o.split_rows), pass_outputs(c, o, dout, o.split_rows));
  }
}

// Walks split at document starts compute what one walk over all rows computes, bit for bit: at a start the state
// is multiplied by a = 0 either way. Documents of every length (one row, across 64-row segments, a start on the last
// row), more starts than walks (8 at most), forward and every gradient.
TEST_F(GatedDeltaRuleGpu, SplitWalksGiveTheOneWalksBits) {
  SCOPED_TRACE(seed());
  for (const Case& c : {Case{700, 2, 4, 64, 48, {1, 64, 65, 130, 250, 251, 300, 400, 401, 520, 640, 699}},
                        Case{8192 / 16, 2, 4, 128, 128, {256}}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.starts.size() << " starts");
    const Operands o = operands(c);
    const ColumnBlock dout = random_gpu({c.rows, c.v_heads * c.v_dim});
    expect_same_bits(pass_outputs(c, o, dout, {}), pass_outputs(c, o, dout, o.split_rows));
  }
}

TEST_F(GatedDeltaRuleGpu, RefusesWhatItCannotRun) {
  Case c{8, 1, 2, 16, 16, {}};
  const Operands o = operands(c);
  const ColumnBlock out = poisoned_block(c.rows, c.v_heads * c.v_dim, 0);
  ops::GatedDeltaShape wide = o.shape;
  wide.k_head_dim = 512;
  EXPECT_THROW(ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, o.a_log, wide, o.starts_gpu, out), Error);
  ops::GatedDeltaShape uneven = o.shape;
  uneven.num_v_heads = 3;
  EXPECT_THROW(ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, o.a_log, uneven, o.starts_gpu, out), Error);
  // dt_bias BF16, A_log F32.
  const Tensor f32_a_log = to_cpu_f32(o.a_log).to(Device::cuda());
  EXPECT_THROW(ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, f32_a_log, o.shape, o.starts_gpu, out), Error);
  // Split rows out of order, past the end, or without document starts.
  const std::vector<int64_t> backwards{5, 3}, past{8}, some{4};
  for (const std::vector<int64_t>* rows : {&backwards, &past})
    EXPECT_THROW(
        ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, o.a_log, o.shape, o.starts_gpu, out, Tensor(), *rows),
        Error);
  EXPECT_THROW(ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, o.a_log, o.shape, Tensor(), out, Tensor(), some),
               Error);
}

// ---------------------------------------------------------------------------------------------------------------
// Benchmark: one layer's recurrence at Qwen3-Next's widths, 2 documents of 4096 tokens.

TEST_F(GatedDeltaRuleGpu, DISABLED_QwenNextWidths) {
  const Case c{8192, 16, 32, 128, 128, {4096}};
  const Operands o = operands(c);
  const ColumnBlock out = poisoned_block(c.rows, c.v_heads * c.v_dim, 0);
  const ColumnBlock dout = random_gpu({c.rows, c.v_heads * c.v_dim});
  const ops::cuda::GatedDeltaBlocks grads = poisoned_grads(c);
  const Tensor d_dt_bias = Tensor::zeros({c.v_heads}, DType::F32, Device::cuda());
  const Tensor d_a_log = Tensor::zeros({c.v_heads}, DType::F32, Device::cuda());
  std::printf("GATED_DELTA_BENCH tokens %lld (2 x 4096) key heads %lld x %lld value heads %lld x %lld\n",
              (long long)c.rows, (long long)c.k_heads, (long long)c.k_dim, (long long)c.v_heads, (long long)c.v_dim);
  // One walk over the 8192 rows, then the two documents' walks side by side (the mixer's way).
  for (const bool split : {false, true}) {
    const std::vector<int64_t> none;
    const std::vector<int64_t>& rows = split ? o.split_rows : none;
    const double forward = mean_gpu_ms([&] {
      ops::cuda::gated_delta_rule_forward(o.gpu, o.dt_bias, o.a_log, o.shape, o.starts_gpu, out, Tensor(), rows);
    });
    const double backward = mean_gpu_ms([&] {
      ops::cuda::gated_delta_rule_backward(dout, o.gpu, o.dt_bias, o.a_log, o.shape, o.starts_gpu, grads, d_dt_bias,
                                           d_a_log, rows);
    });
    gpu::synchronize();
    std::printf("GATED_DELTA_BENCH %s fwd %8.3f ms  bwd %8.3f ms  peak GPU memory %.2f GiB\n",
                split ? "2 walks" : "1 walk ", forward, backward, double(gpu::memory_stats().peak_in_use) / (1 << 30));
  }
}

}  // namespace
}  // namespace moetune
