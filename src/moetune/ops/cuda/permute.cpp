#include "moetune/ops/cuda/permute.h"

#include <climits>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/permute_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

// Scratch for the plan's sort, handed back (stream-ordered) when the plan has been queued, or on an error.
class Workspace {
 public:
  explicit Workspace(size_t nbytes) : data_(nbytes ? gpu::allocate(nbytes) : nullptr), nbytes_(nbytes) {}
  ~Workspace() {
    if (data_) gpu::release(data_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  void* data_;
  size_t nbytes_;
};

void expect_plan(const DevicePermutation& plan, std::string_view op) {
  MOETUNE_CHECK(plan.num_experts >= 1 && plan.top_k >= 1, "{}: the permutation plan is empty ({} experts, top-{})",
                op, plan.num_experts, plan.top_k);
  const int64_t choices = plan.row_of.defined() ? plan.row_of.numel() : -1;
  check_gpu_tensor(op, "plan.row_of", plan.row_of, DType::I32, {choices});
  MOETUNE_CHECK(choices % plan.top_k == 0, "{}: plan.row_of {} is not T·{} rows", op, plan.row_of.str(), plan.top_k);
  check_gpu_tensor(op, "plan.source", plan.source, DType::I32, {choices});
  check_gpu_tensor(op, "plan.offsets", plan.offsets, DType::I32, {plan.num_experts + 1});
}

// The activations' element type, as the gather kernels take it.
RowType row_type(const Tensor& t, std::string_view op, std::string_view name) {
  if (t.dtype() == DType::BF16) return RowType::BF16;
  if (t.dtype() == DType::F32) return RowType::F32;
  fail("{}: {} must be BF16 or F32, got {}", op, name, t.str());
}

// A [rows, H] activation tensor on the GPU whose dtype is `dtype`.
void expect_rows(const Tensor& t, std::string_view op, std::string_view name, DType dtype, int64_t rows,
                 int64_t hidden) {
  check_gpu_tensor(op, name, t, dtype, {rows, hidden});
}

// The hidden size, from a tensor that must be [rows, H].
int64_t hidden_of(const Tensor& t, std::string_view op, std::string_view name, int64_t rows) {
  check_gpu_tensor(op, name, t);
  MOETUNE_CHECK(t.dim() == 2 && t.size(0) == rows, "{}: {} must be [{}, H], got {}", op, name, rows, t.str());
  return t.size(1);
}

}  // namespace

DevicePermutation plan_permutation(const Tensor& expert_ids, int64_t num_experts) {
  constexpr std::string_view op = "plan_permutation";
  check_gpu_tensor(op, "expert_ids", expert_ids);
  MOETUNE_CHECK(expert_ids.dtype() == DType::I32 && expert_ids.dim() == 2 && expert_ids.size(1) >= 1,
                "{}: expert_ids must be I32 [T, k], got {}", op, expert_ids.str());
  MOETUNE_CHECK(num_experts >= 1 && num_experts < INT_MAX, "{}: {} experts", op, num_experts);
  const int64_t top_k = expert_ids.size(1), choices = expert_ids.numel();
  MOETUNE_CHECK(choices <= INT_MAX, "{}: {} choices (expert_ids {}) exceed the 32-bit row indices", op, choices,
                expert_ids.str());
  const Device device = expert_ids.device();
  DevicePermutation plan{Tensor::empty({num_experts + 1}, DType::I32, device),
                         Tensor::empty({choices}, DType::I32, device), Tensor::empty({choices}, DType::I32, device),
                         num_experts, top_k};
  size_t workspace_bytes = 0;
  gpu::check(permutation_workspace_bytes(choices, int(num_experts), &workspace_bytes),
             fmt::format("{} workspace size for {}", op, expert_ids.str()));
  const Workspace workspace(workspace_bytes);
  gpu::check(launch_plan_permutation(device_data<int32_t>(expert_ids), choices, int(top_k), int(num_experts),
                                     workspace.data(), workspace.nbytes(), device_data<int32_t>(plan.offsets),
                                     device_data<int32_t>(plan.row_of), device_data<int32_t>(plan.source),
                                     gpu::stream()),
             fmt::format("{} of {} over {} experts", op, expert_ids.str(), num_experts));
  return plan;
}

void permute_tokens(const Tensor& x, const DevicePermutation& plan, const Tensor& out) {
  constexpr std::string_view op = "permute_tokens";
  expect_plan(plan, op);
  const int64_t hidden = hidden_of(x, op, "x", plan.tokens());
  expect_rows(out, op, "out", x.dtype(), plan.rows(), hidden);
  gpu::check(launch_permute_rows(x.raw_data(), device_data<int32_t>(plan.source), plan.rows(),
                                 hidden * int64_t(dtype_size(x.dtype())), out.raw_data(), gpu::stream()),
             fmt::format("{} of {}", op, x.str()));
}

void gather_rows(const Tensor& x, const Tensor& index, const Tensor& out) {
  constexpr std::string_view op = "gather_rows";
  check_gpu_tensor(op, "index", index, DType::I32, {index.numel()});
  const int64_t hidden = hidden_of(x, op, "x", x.size(0));
  expect_rows(out, op, "out", x.dtype(), index.numel(), hidden);
  if (index.numel() == 0) return;
  gpu::check(launch_permute_rows(x.raw_data(), device_data<int32_t>(index), index.numel(),
                                 hidden * int64_t(dtype_size(x.dtype())), out.raw_data(), gpu::stream()),
             fmt::format("{} of {}", op, x.str()));
}

void sum_rows(const Tensor& rows, const Tensor& index, const Tensor& out, const Tensor& residual) {
  constexpr std::string_view op = "sum_rows";
  check_gpu_tensor(op, "rows", rows);
  check_gpu_tensor(op, "index", index);
  MOETUNE_CHECK(index.dtype() == DType::I32 && index.dim() == 2 && index.size(1) >= 1,
                "{}: index must be I32 [T, P], got {}", op, index.str());
  const int64_t tokens = index.size(0);
  const int64_t hidden = hidden_of(rows, op, "rows", rows.size(0));
  const RowType type = row_type(rows, op, "rows");
  expect_rows(out, op, "out", rows.dtype(), tokens, hidden);
  if (residual.defined()) expect_rows(residual, op, "residual", rows.dtype(), tokens, hidden);
  gpu::check(launch_gather_sum_rows(type, rows.raw_data(), device_data<int32_t>(index), nullptr,
                                    device_data<void>(residual), tokens, int(index.size(1)), hidden, rows.size(0),
                                    out.raw_data(), gpu::stream()),
             fmt::format("{} of {}", op, rows.str()));
}

void permute_tokens_backward(const Tensor& dpermuted, const DevicePermutation& plan, const Tensor& dx,
                             const Tensor& residual) {
  constexpr std::string_view op = "permute_tokens_backward";
  expect_plan(plan, op);
  const int64_t tokens = plan.tokens();
  const int64_t hidden = hidden_of(dpermuted, op, "dpermuted", plan.rows());
  const RowType type = row_type(dpermuted, op, "dpermuted");
  expect_rows(dx, op, "dx", dpermuted.dtype(), tokens, hidden);
  if (residual.defined()) expect_rows(residual, op, "residual", dpermuted.dtype(), tokens, hidden);
  gpu::check(launch_gather_sum_rows(type, dpermuted.raw_data(), device_data<int32_t>(plan.row_of), nullptr,
                                    device_data<void>(residual), tokens, int(plan.top_k), hidden, plan.rows(),
                                    dx.raw_data(), gpu::stream()),
             fmt::format("{} of {}", op, dpermuted.str()));
}

void combine_experts(const Tensor& expert_out, const DevicePermutation& plan, const Tensor& weights,
                     const Tensor& out, const Tensor& residual) {
  constexpr std::string_view op = "combine_experts";
  expect_plan(plan, op);
  const int64_t tokens = plan.tokens();
  const int64_t hidden = hidden_of(expert_out, op, "expert_out", plan.rows());
  const RowType type = row_type(expert_out, op, "expert_out");
  check_gpu_tensor(op, "weights", weights, DType::F32, {tokens, plan.top_k});
  expect_rows(out, op, "out", expert_out.dtype(), tokens, hidden);
  if (residual.defined()) expect_rows(residual, op, "residual", expert_out.dtype(), tokens, hidden);
  gpu::check(launch_gather_sum_rows(type, expert_out.raw_data(), device_data<int32_t>(plan.row_of),
                                    device_data<float>(weights), device_data<void>(residual), tokens,
                                    int(plan.top_k), hidden, plan.rows(), out.raw_data(), gpu::stream()),
             fmt::format("{} of {}", op, expert_out.str()));
}

void combine_experts_backward(const Tensor& dout, const Tensor& expert_out, const DevicePermutation& plan,
                              const Tensor& weights, const Tensor& dexpert_out, const Tensor& dweights) {
  constexpr std::string_view op = "combine_experts_backward";
  expect_plan(plan, op);
  const int64_t tokens = plan.tokens(), choices = plan.rows();
  const int64_t hidden = hidden_of(dout, op, "dout", tokens);
  const RowType type = row_type(dout, op, "dout");
  expect_rows(expert_out, op, "expert_out", dout.dtype(), choices, hidden);
  expect_rows(dexpert_out, op, "dexpert_out", dout.dtype(), choices, hidden);
  check_gpu_tensor(op, "weights", weights, DType::F32, {tokens, plan.top_k});
  check_gpu_tensor(op, "dweights", dweights, DType::F32, {tokens, plan.top_k});
  MOETUNE_CHECK(choices == 0 || (dexpert_out.raw_data() != expert_out.raw_data() &&
                                 dexpert_out.raw_data() != dout.raw_data()),
                "{}: dexpert_out {} must not share memory with the inputs", op, dexpert_out.str());
  gpu::check(launch_combine_backward(type, dout.raw_data(), expert_out.raw_data(), device_data<int32_t>(plan.row_of),
                                     device_data<float>(weights), tokens, int(plan.top_k), hidden, plan.rows(),
                                     dexpert_out.raw_data(), device_data<float>(dweights), gpu::stream()),
             fmt::format("{} of {}", op, dout.str()));
}

}  // namespace moetune::ops::cuda
