// The memory-bound row kernels of a MoE step (issue 14): RMSNorm forward and backward, the experts' combine and
// the permutation's backward (a gather-sum of top_k rows per token). Each has a second kernel shape beside the
// one it started from (RMSNorm's is the faster at 512 wide only, norm.cu says); the two give the same bits (checked here on ragged shapes, in-place outputs included), and, not a check,
// DISABLED_TimesMoonlightShapes times both at the Moonlight benchmark's shapes (8192 tokens of 2048, 64 experts
// top-6) with the bytes each must move.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_timing.h"
#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/norm_kernel_choice.h"
#include "moetune/ops/cuda/norm_kernels.h"
#include "moetune/ops/cuda/permute_kernel_choice.h"

namespace moetune {
namespace {

using ops::cuda::RowType;
using testing::poisoned;

const Device kGpu = Device::cuda();
constexpr float kEps = 1e-6f;
constexpr int kRowsInRegisters[] = {1, 2, 4, 8};
constexpr int kBackwardRowsInRegisters[] = {1, 2, 4};  // 8 rows: 255 registers, too many for a 256-thread block

std::vector<char> bytes_of(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  const auto* p = static_cast<const char*>(host.raw_data());
  return {p, p + host.nbytes()};
}

Tensor upload_i32(const std::vector<int32_t>& values) {
  return Tensor::from_vector(values, {int64_t(values.size())}).to(kGpu);
}

// A stand-in for the routing: each token's top_k distinct experts, rows sorted stably by expert as the plan
// sorts them. row_of[t·k + j] is choice (t, j)'s row.
struct Routing {
  std::vector<int32_t> row_of;
};

Routing random_routing(int64_t tokens, int top_k, int experts, std::mt19937& rng) {
  std::vector<int32_t> expert_of(size_t(tokens * top_k));
  std::vector<int32_t> all(static_cast<size_t>(experts));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    for (int j = 0; j < top_k; ++j) expert_of[size_t(t * top_k + j)] = all[size_t(j % experts)];
  }
  std::vector<int32_t> order(expert_of.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return expert_of[a] < expert_of[b]; });
  Routing routing{std::vector<int32_t>(order.size())};
  for (size_t r = 0; r < order.size(); ++r) routing.row_of[size_t(order[r])] = int32_t(r);
  return routing;
}

class RowKernelsGpu : public testing::GpuTest {
 protected:
  Tensor random_bf16(const Shape& shape) { return testing::random_normal(shape, DType::BF16, kGpu, rng()); }

  // Forward of `rows_in_registers` (0: the one-row kernel) into a fresh output or in place.
  std::vector<char> norm_forward(int rows_in_registers, const Tensor& x, const Tensor& weight, bool in_place) {
    const int64_t width = weight.numel();
    const Tensor y = in_place ? x.clone() : poisoned(x.shape(), DType::BF16, kGpu);
    const Tensor input = in_place ? y : x;
    gpu::check(ops::cuda::launch_rms_norm_forward_with(rows_in_registers, input.raw_data(), weight.raw_data(),
                                                       y.raw_data(), x.numel() / width, width, kEps, gpu::stream()),
               "rms_norm_forward");
    return bytes_of(y);
  }

  // Backward's dx and dweight bytes; dx fresh, in the residual's storage or in dy's.
  enum class Dx { Fresh, Residual, Dy };
  std::vector<char> norm_backward(int rows_in_registers, const Tensor& dy, const Tensor& x, const Tensor& weight,
                                  const Tensor& residual, const Tensor& dweight_start, Dx dx_storage) {
    const int64_t width = weight.numel(), rows = x.numel() / width;
    const Tensor dy_copy = dy.clone();
    const Tensor residual_copy = residual.defined() ? residual.clone() : Tensor();
    Tensor dx = poisoned(x.shape(), DType::BF16, kGpu);
    if (dx_storage == Dx::Residual) dx = residual_copy;
    if (dx_storage == Dx::Dy) dx = dy_copy;
    const Tensor dweight = dweight_start.clone();
    const size_t workspace_bytes = ops::cuda::rms_norm_backward_workspace_bytes(rows, width);
    const Tensor workspace = Tensor::empty({int64_t(workspace_bytes / 4)}, DType::F32, kGpu);
    gpu::check(ops::cuda::launch_rms_norm_backward_with(
                   rows_in_registers, dy_copy.raw_data(), x.raw_data(), weight.raw_data(),
                   residual.defined() ? residual_copy.raw_data() : nullptr, dx.raw_data(), dweight.raw_data(),
                   dweight.dtype() == DType::BF16, rows, width, kEps, workspace.raw_data(), gpu::stream()),
               "rms_norm_backward");
    std::vector<char> out = bytes_of(dx), dweight_bytes = bytes_of(dweight);
    out.insert(out.end(), dweight_bytes.begin(), dweight_bytes.end());
    return out;
  }
};

// Widths: Moonlight's hidden (2048) and kv_a_layernorm (512), a width between them (1024), one chunk
// short of a whole warp (24: 3 chunks); rows: fewer and more than the backward's 768 blocks, not multiples of 8.
TEST_F(RowKernelsGpu, NormRowsInRegistersGiveTheOneRowKernelsBits) {
  SCOPED_TRACE(seed());
  for (const Shape& shape : std::vector<Shape>{{1100, 2048}, {1537, 512}, {37, 1024}, {2051, 24}, {3, 2048}}) {
    SCOPED_TRACE(shape_str(shape));
    const int64_t width = shape.back();
    const Tensor x = random_bf16(shape), dy = random_bf16(shape), residual = random_bf16(shape);
    const Tensor weight = testing::random_normal({width}, DType::BF16, kGpu, rng(), 0.2f);
    for (const bool in_place : {false, true}) {
      const std::vector<char> expected = norm_forward(0, x, weight, in_place);
      for (const int rows : kRowsInRegisters)
        EXPECT_EQ(norm_forward(rows, x, weight, in_place), expected) << "forward, " << rows << " rows, in place "
                                                                      << in_place;
    }
    for (const DType dweight_dtype : {DType::F32, DType::BF16}) {
      const Tensor dweight = testing::random_normal({width}, dweight_dtype, kGpu, rng());
      struct Case { bool residual; Dx dx; };
      for (const Case c : {Case{false, Dx::Fresh}, Case{true, Dx::Fresh}, Case{true, Dx::Residual}, Case{false, Dx::Dy}}) {
        const Tensor r = c.residual ? residual : Tensor();
        const std::vector<char> expected = norm_backward(0, dy, x, weight, r, dweight, c.dx);
        for (const int rows : kBackwardRowsInRegisters)
          EXPECT_EQ(norm_backward(rows, dy, x, weight, r, dweight, c.dx), expected)
              << "backward, " << rows << " rows, dweight " << dtype_name(dweight_dtype) << ", residual "
              << c.residual << ", dx storage " << int(c.dx);
      }
    }
  }
}

TEST_F(RowKernelsGpu, NormRowsInRegistersRefuseRowsTheyDoNotFit) {
  const Tensor x = random_bf16({4, 4104}), weight = random_bf16({4104});
  EXPECT_EQ(ops::cuda::launch_rms_norm_forward_with(4, x.raw_data(), weight.raw_data(), x.raw_data(), 4, 4104, kEps,
                                                    gpu::stream()),
            cudaErrorInvalidValue);
  const Tensor narrow = random_bf16({4, 36}), narrow_weight = random_bf16({36});  // 36: not whole chunks
  EXPECT_EQ(ops::cuda::launch_rms_norm_forward_with(4, narrow.raw_data(), narrow_weight.raw_data(), narrow.raw_data(),
                                                    4, 36, kEps, gpu::stream()),
            cudaErrorInvalidValue);
}

// The gather-sum both ways, over top_k 1, 6, 8 (the hoisted kernel) and 9 (the loop either way), with weights
// (the combine) and without (the permutation's backward), a residual apart or in place, and rows past kept_rows.
TEST_F(RowKernelsGpu, HoistedGatherSumGivesTheLoopsBits) {
  SCOPED_TRACE(seed());
  for (const RowType type : {RowType::BF16, RowType::F32})
    for (const int top_k : {1, 6, 8, 9})
      for (const int64_t hidden : {int64_t(2048), int64_t(72)}) {
        const int64_t tokens = 301;
        const DType dtype = type == RowType::BF16 ? DType::BF16 : DType::F32;
        const Routing routing = random_routing(tokens, top_k, 16, rng());
        const int64_t choices = tokens * top_k, kept_rows = choices - choices / 5;
        const Tensor rows = testing::random_normal({choices, hidden}, dtype, kGpu, rng());
        const Tensor row_of = upload_i32(routing.row_of);
        const Tensor weights = testing::random_normal({tokens, top_k}, DType::F32, kGpu, rng());
        const Tensor residual = testing::random_normal({tokens, hidden}, dtype, kGpu, rng());
        for (const bool with_weights : {false, true})
          for (const int residual_mode : {0, 1, 2}) {  // none, apart, in place
            SCOPED_TRACE(::testing::Message() << "type " << int(type) << " top_k " << top_k << " hidden " << hidden
                                              << " weights " << with_weights << " residual " << residual_mode);
            std::vector<char> results[2];
            for (const bool hoisted : {false, true}) {
              const Tensor res = residual_mode == 0 ? Tensor() : residual.clone();
              const Tensor out = residual_mode == 2 ? res : poisoned({tokens, hidden}, dtype, kGpu);
              gpu::check(ops::cuda::launch_gather_sum_rows_with(
                             hoisted, type, rows.raw_data(), static_cast<const int32_t*>(row_of.raw_data()),
                             with_weights ? static_cast<const float*>(weights.raw_data()) : nullptr,
                             res.defined() ? res.raw_data() : nullptr, tokens, top_k, hidden, kept_rows,
                             out.raw_data(), gpu::stream()),
                         "gather_sum_rows");
              results[hoisted] = bytes_of(out);
            }
            EXPECT_EQ(results[1], results[0]);
          }
      }
}

// Microseconds a launch, and the bandwidth that makes of `bytes` (what the kernel must move at least).
void report(const char* what, double ms, double bytes) {
  std::printf("  %-58s %8.1f us  %6.2f TB/s (%.1f MB)\n", what, ms * 1e3, bytes / (ms * 1e-3) / 1e12, bytes / 1e6);
}

TEST_F(RowKernelsGpu, DISABLED_TimesMoonlightShapes) {
  const int64_t tokens = 8192, hidden = 2048;
  constexpr int kRuns = 50;
  std::printf("RMSNorm, bf16 rows (0 = the one-row kernel, before; n = n rows in registers)\n");
  for (const int64_t width : {hidden, int64_t(512)}) {
    const Tensor x = random_bf16({tokens, width}), dy = random_bf16({tokens, width});
    const Tensor residual = random_bf16({tokens, width}), dx = random_bf16({tokens, width});
    const Tensor weight = testing::random_normal({width}, DType::BF16, kGpu, rng(), 0.2f);
    const Tensor y = random_bf16({tokens, width});
    const Tensor dweight = Tensor::zeros({width}, DType::BF16, kGpu);
    const size_t workspace_bytes = ops::cuda::rms_norm_backward_workspace_bytes(tokens, width);
    const Tensor workspace = Tensor::empty({int64_t(workspace_bytes / 4)}, DType::F32, kGpu);
    const double tensor_bytes = double(tokens * width * 2);
    for (const int rows : {0, 1, 2, 4, 8}) {
      const double ms = testing::mean_gpu_ms(
          [&] {
            gpu::check(ops::cuda::launch_rms_norm_forward_with(rows, x.raw_data(), weight.raw_data(), y.raw_data(),
                                                               tokens, width, kEps, gpu::stream()),
                       "forward");
          },
          3, kRuns);
      char what[128];
      std::snprintf(what, sizeof what, "forward [%lld, %lld], %d", static_cast<long long>(tokens),
                    static_cast<long long>(width), rows);
      report(what, ms, 2 * tensor_bytes);
    }
    for (const bool with_residual : {false, true})
      for (const int rows : {0, 1, 2, 4}) {
        const double ms = testing::mean_gpu_ms(
            [&] {
              gpu::check(ops::cuda::launch_rms_norm_backward_with(
                             rows, dy.raw_data(), x.raw_data(), weight.raw_data(),
                             with_residual ? residual.raw_data() : nullptr, dx.raw_data(), dweight.raw_data(), true,
                             tokens, width, kEps, workspace.raw_data(), gpu::stream()),
                         "backward");
            },
            3, kRuns);
        char what[128];
        std::snprintf(what, sizeof what, "backward [%lld, %lld]%s, %d (+ column sums)",
                      static_cast<long long>(tokens), static_cast<long long>(width),
                      with_residual ? " + residual" : "", rows);
        report(what, ms, (with_residual ? 4 : 3) * tensor_bytes + 2.0 * double(workspace_bytes));
      }
  }

  const int top_k = 6;
  const int64_t choices = tokens * top_k;
  const Routing routing = random_routing(tokens, top_k, 64, rng());
  const Tensor row_of = upload_i32(routing.row_of);
  const Tensor expert_rows = random_bf16({choices, hidden});
  const Tensor weights = testing::random_normal({tokens, top_k}, DType::F32, kGpu, rng());
  const Tensor residual = random_bf16({tokens, hidden}), out = random_bf16({tokens, hidden});
  const double row_bytes = double(hidden * 2);
  std::printf("Gather-sum of %d rows a token, [%lld, %lld] bf16 (0 = the loop, before; 1 = hoisted)\n", top_k,
              static_cast<long long>(tokens), static_cast<long long>(hidden));
  for (const bool combine : {true, false})
    for (const bool hoisted : {false, true}) {
      const double ms = testing::mean_gpu_ms(
          [&] {
            gpu::check(ops::cuda::launch_gather_sum_rows_with(
                           hoisted, RowType::BF16, expert_rows.raw_data(),
                           static_cast<const int32_t*>(row_of.raw_data()),
                           combine ? static_cast<const float*>(weights.raw_data()) : nullptr,
                           combine ? residual.raw_data() : nullptr, tokens, top_k, hidden, choices, out.raw_data(),
                           gpu::stream()),
                       "gather_sum");
          },
          3, kRuns);
      report(combine ? (hoisted ? "combine (weights, residual), 1" : "combine (weights, residual), 0")
                     : (hoisted ? "permutation backward (no weights), 1" : "permutation backward (no weights), 0"),
             ms, double(tokens) * row_bytes * (top_k + (combine ? 2 : 1)));
    }
}

}  // namespace
}  // namespace moetune
