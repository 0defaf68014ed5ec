// Mamba2's recurrent step kernels (ops/cuda/mamba2_step.h, generation with a cached conv window and SSM state)
// against the training kernels over the whole sequence (ops/cuda/mamba2_conv.h, the chunked scan of
// ops/cuda/mamba2_scan.h, themselves held to the CPU reference by test_mamba2_gpu.cpp): the sequence fed in
// pieces of 1 to 130 rows, each continuing from the state the one before left, must give the whole pass's rows.
// The conv sums in the training kernel's order, so its rows are the same bits; the scan's recurrence against the
// chunked algorithm is fp32 in both, then rounded to bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "column_block_test.h"
#include "gpu_test_util.h"
#include "moetune/model/block_util.h"
#include "moetune/ops/cast.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/cuda/mamba2_scan.h"
#include "moetune/ops/cuda/mamba2_step.h"
#include "test_util.h"

namespace moetune {
namespace {

using ops::cuda::ColumnBlock;
using testing::cpu_block;
using testing::relative_error;
using testing::to_cpu_f32;

// Rows [start, start + count) of a [rows, width] block of a wider tensor, as a block of its own.
ColumnBlock rows_of(const ColumnBlock& block, int64_t start, int64_t count) {
  return {block.tensor.narrow(start, count), block.first, block.width()};
}

class Mamba2StepGpu : public testing::ColumnBlockGpuTest {
 protected:
  static std::vector<int64_t> pieces(int64_t rows) {
    std::vector<int64_t> sizes;
    const int64_t pattern[] = {1, 7, 1, 1, 64, 2, 130, 3};
    for (int64_t at = 0, i = 0; at < rows; ++i) {
      sizes.push_back(std::min(pattern[i % 8], rows - at));
      at += sizes.back();
    }
    return sizes;
  }
};

TEST_F(Mamba2StepGpu, ConvStepsGiveTheWholePassBits) {
  SCOPED_TRACE(seed());
  for (const int64_t kernel : {4, 2, 1}) {
    const int64_t rows = 300, channels = 200;
    const ColumnBlock xbc = random_block(rows, channels, 3);
    const Tensor weight = random_gpu({channels, kernel}, 0.5f), bias = random_gpu({channels}, 0.5f);
    std::vector<uint8_t> starts(size_t(rows), 0);
    starts[0] = 1;
    const ColumnBlock whole = poisoned_block(rows, channels, 2);
    ops::cuda::mamba2_conv_forward(xbc, weight, bias, ops::cuda::upload_row_flags(starts), {}, whole);
    const Tensor window = Tensor::zeros({kernel - 1, channels}, DType::BF16, Device::cuda());
    const ColumnBlock stepped = poisoned_block(rows, channels, 1);
    int64_t at = 0;
    for (const int64_t count : pieces(rows)) {
      ops::cuda::mamba2_conv_step(rows_of(xbc, at, count), weight, bias, window, rows_of(stepped, at, count));
      at += count;
    }
    EXPECT_EQ(relative_error(cpu_block(stepped), cpu_block(whole)), 0.0) << "kernel " << kernel;
    // The window ends holding the sequence's last K - 1 rows of xbc, oldest first.
    if (kernel > 1) {
      EXPECT_EQ(relative_error(to_cpu_f32(window), cpu_block(rows_of(xbc, rows - (kernel - 1), kernel - 1))), 0.0);
    }
  }
}

TEST_F(Mamba2StepGpu, ScanStepsFollowTheChunkedScan) {
  SCOPED_TRACE(seed());
  struct Case {
    int64_t rows, heads, head_dim, groups, state;
    double dt_min;
  };
  // Nemotron-3-Nano's head_dim and state (fewer heads); a state narrower than a warp; the clamp at work.
  for (const Case c : {Case{300, 4, 64, 2, 128, 0.001}, Case{90, 6, 8, 3, 16, 0.0}, Case{40, 2, 4, 1, 8, 0.04}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.heads << "x" << c.head_dim << ", state " << c.state);
    const ops::Mamba2Scan scan{c.heads, c.head_dim, c.groups, c.state, c.dt_min, INFINITY};
    const int64_t inner = c.heads * c.head_dim, bc = c.groups * c.state;
    const ops::cuda::Mamba2ScanBlocks in{random_block(c.rows, inner, 3), random_block(c.rows, c.heads, 2),
                                         random_block(c.rows, bc, 1), random_block(c.rows, bc, 4)};
    std::vector<float> dt_bias(size_t(c.heads)), a_log(size_t(c.heads)), d(size_t(c.heads));
    for (int64_t h = 0; h < c.heads; ++h) {
      const float dt = 0.01f + 0.02f * float(h);
      dt_bias[size_t(h)] = dt + std::log(-std::expm1(-dt));  // softplus⁻¹
      a_log[size_t(h)] = std::log(float(h + 1));
      d[size_t(h)] = 1.0f + 0.05f * float(h);
    }
    const auto upload = [](const std::vector<float>& v) {
      return ops::cast(Tensor::from_vector(v, {int64_t(v.size())}), DType::BF16).to(Device::cuda());
    };
    const ops::Mamba2ScanParams params{upload(dt_bias), upload(a_log), upload(d)};
    std::vector<uint8_t> starts(size_t(c.rows), 0);
    starts[0] = 1;
    const ColumnBlock whole = poisoned_block(c.rows, inner, 2);
    ops::cuda::mamba2_scan_forward(in, params, scan, 128, ops::cuda::upload_row_flags(starts), whole);
    const Tensor state = Tensor::zeros({c.heads, c.head_dim, c.state}, DType::F32, Device::cuda());
    const ColumnBlock stepped = poisoned_block(c.rows, inner, 1);
    int64_t at = 0;
    for (const int64_t count : pieces(c.rows)) {
      const ops::cuda::Mamba2ScanBlocks part{rows_of(in.x, at, count), rows_of(in.dt, at, count),
                                             rows_of(in.b, at, count), rows_of(in.c, at, count)};
      ops::cuda::mamba2_scan_step(part, params, scan, state, rows_of(stepped, at, count));
      at += count;
    }
    const double error = relative_error(cpu_block(stepped), cpu_block(whole));
    std::printf("scan steps against the chunked scan: relative error %.2e\n", error);
    EXPECT_LT(error, 1e-2);

    // Generation's mix: the pieces of several rows through the chunked scan continuing the state (chunks of 16, so
    // that pieces span several), single rows through the step. Same rows as the whole pass, and the same end state
    // as the steps alone left.
    const Tensor mixed_state = Tensor::zeros({c.heads, c.head_dim, c.state}, DType::F32, Device::cuda());
    const ColumnBlock mixed = poisoned_block(c.rows, inner, 1);
    at = 0;
    for (const int64_t count : pieces(c.rows)) {
      const ops::cuda::Mamba2ScanBlocks part{rows_of(in.x, at, count), rows_of(in.dt, at, count),
                                             rows_of(in.b, at, count), rows_of(in.c, at, count)};
      if (count > 1)
        ops::cuda::mamba2_scan_forward(part, params, scan, 16, Tensor(), rows_of(mixed, at, count), mixed_state);
      else
        ops::cuda::mamba2_scan_step(part, params, scan, mixed_state, rows_of(mixed, at, count));
      at += count;
    }
    const double mixed_error = relative_error(cpu_block(mixed), cpu_block(whole));
    const double state_error = relative_error(to_cpu_f32(mixed_state), to_cpu_f32(state));
    std::printf("chunked pieces with steps against the whole pass: rows %.2e, end state %.2e\n", mixed_error,
                state_error);
    EXPECT_LT(mixed_error, 1e-2);
    EXPECT_LT(state_error, 1e-4);
  }
}

// The chunked scan continuing a state honours document starts inside its rows: from a start on, the rows are a
// fresh scan's, whatever state came in.
TEST_F(Mamba2StepGpu, ChunkedScanWithAStateRestartsAtADocumentStart) {
  SCOPED_TRACE(seed());
  const int64_t rows = 200, split = 90, restart = 120, heads = 4, head_dim = 16, groups = 2, state_size = 32;
  const ops::Mamba2Scan scan{heads, head_dim, groups, state_size, 0.0, INFINITY};
  const int64_t inner = heads * head_dim, bc = groups * state_size;
  const ops::cuda::Mamba2ScanBlocks in{random_block(rows, inner, 1), random_block(rows, heads, 0),
                                       random_block(rows, bc, 2), random_block(rows, bc, 0)};
  const ops::Mamba2ScanParams params{random_gpu({heads}, 0.5f), random_gpu({heads}, 0.5f), random_gpu({heads})};
  std::vector<uint8_t> starts(size_t(rows), 0);
  starts[0] = starts[size_t(restart)] = 1;
  const ColumnBlock whole = poisoned_block(rows, inner, 0);
  ops::cuda::mamba2_scan_forward(in, params, scan, 64, ops::cuda::upload_row_flags(starts), whole);
  const Tensor state = Tensor::zeros({heads, head_dim, state_size}, DType::F32, Device::cuda());
  const ColumnBlock pieces_out = poisoned_block(rows, inner, 0);
  const auto part = [&](int64_t at, int64_t count) {
    return ops::cuda::Mamba2ScanBlocks{rows_of(in.x, at, count), rows_of(in.dt, at, count), rows_of(in.b, at, count),
                                       rows_of(in.c, at, count)};
  };
  ops::cuda::mamba2_scan_forward(part(0, split), params, scan, 64, Tensor(), rows_of(pieces_out, 0, split), state);
  const std::vector<uint8_t> later(starts.begin() + split, starts.end());
  ops::cuda::mamba2_scan_forward(part(split, rows - split), params, scan, 64, ops::cuda::upload_row_flags(later),
                                 rows_of(pieces_out, split, rows - split), state);
  const double error = relative_error(cpu_block(pieces_out), cpu_block(whole));
  std::printf("two chunked pieces (a start in the second) against the whole pass: %.2e\n", error);
  EXPECT_LT(error, 1e-2);
  // Past the start, the rows owe nothing to the state that came in: zeroing it changes none of them.
  const Tensor fresh = Tensor::zeros({heads, head_dim, state_size}, DType::F32, Device::cuda());
  const ColumnBlock again = poisoned_block(rows - split, inner, 0);
  ops::cuda::mamba2_scan_forward(part(split, rows - split), params, scan, 64, ops::cuda::upload_row_flags(later), again,
                                 fresh);
  const int64_t past = restart - split;
  EXPECT_EQ(relative_error(cpu_block(rows_of(again, past, rows - restart)),
                           cpu_block(rows_of(pieces_out, restart, rows - restart))),
            0.0);
  EXPECT_EQ(relative_error(to_cpu_f32(fresh), to_cpu_f32(state)), 0.0);
}

TEST_F(Mamba2StepGpu, RefusesMismatchedState) {
  const ColumnBlock xbc = random_block(3, 16, 0);
  const Tensor weight = random_gpu({16, 4}), wrong_window = Tensor::zeros({4, 16}, DType::BF16, Device::cuda());
  EXPECT_THROW(ops::cuda::mamba2_conv_step(xbc, weight, {}, wrong_window, poisoned_block(3, 16, 0)), Error);
  const ops::Mamba2Scan scan{2, 4, 1, 8, 0.0, INFINITY};
  const ops::cuda::Mamba2ScanBlocks in{random_block(3, 8, 0), random_block(3, 2, 0), random_block(3, 8, 0),
                                       random_block(3, 8, 0)};
  const ops::Mamba2ScanParams params{random_gpu({2}), random_gpu({2}), random_gpu({2})};
  const Tensor wrong_state = Tensor::zeros({2, 4, 16}, DType::F32, Device::cuda());
  EXPECT_THROW(ops::cuda::mamba2_scan_step(in, params, scan, wrong_state, poisoned_block(3, 8, 0)), Error);
  EXPECT_THROW(ops::cuda::mamba2_scan_forward(in, params, scan, 16, Tensor(), poisoned_block(3, 8, 0), wrong_state),
               Error);
}

}  // namespace
}  // namespace moetune
