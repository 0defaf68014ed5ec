#include "moetune/ops/cuda/grouped_gemm.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/grouped_gemm_kernels.h"

namespace moetune::ops::cuda {
namespace {

void check_operand(std::string_view op, std::string_view name, const Tensor& t, int64_t dims, DType dtype) {
  MOETUNE_CHECK(t.defined(), "{}: {} is undefined", op, name);
  MOETUNE_CHECK(t.device().is_cuda() && t.dim() == dims && t.dtype() == dtype, "{}: {} is {}, expected a {}-D {} CUDA tensor",
                op, name, t.str(), dims, dtype_name(dtype));
}

// TMA reads and writes whole 16-byte rows from 16-byte aligned addresses.
void check_matrix(std::string_view op, std::string_view name, const Tensor& t, int64_t dims) {
  check_operand(op, name, t, dims, DType::BF16);
  MOETUNE_CHECK(t.numel() == 0 || reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0,
                "{}: {} {} does not start on a 16-byte boundary", op, name, t.str());
}

void check_inner_size(std::string_view op, std::string_view what, int64_t size) {
  MOETUNE_CHECK(size > 0 && size % 8 == 0 && size <= std::numeric_limits<int32_t>::max(),
                "{}: {} = {} must be a positive multiple of 8 (16-byte rows of bf16 for TMA)", op, what, size);
}

void check_same_device(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  const Device device = (*tensors.begin())->device();
  for (const Tensor* t : tensors)
    MOETUNE_CHECK(t->device() == device, "{}: {} is not on the same device as {}", op, t->str(),
                  (*tensors.begin())->str());
}

void check_offsets(std::string_view op, const Tensor& offsets, int64_t groups, int64_t rows) {
  check_operand(op, "offsets", offsets, 1, DType::I32);
  MOETUNE_CHECK(offsets.numel() == groups + 1, "{}: offsets {} for {} groups, expected [{}]", op, offsets.str(), groups,
                groups + 1);
  // The grid has a row per group in the empty-group kernel; CUTLASS's shapes are int.
  MOETUNE_CHECK(groups <= 65535, "{}: {} groups, at most 65535 are supported", op, groups);
  MOETUNE_CHECK(rows <= std::numeric_limits<int32_t>::max(), "{}: {} rows, at most 2^31 - 1 are supported", op, rows);
}

// Read once per device: CUTLASS sizes its persistent grid from it.
int multiprocessor_count() {
  static std::array<std::atomic<int>, 64> cache{};
  int device = 0;
  gpu::check(cudaGetDevice(&device), "cudaGetDevice");
  MOETUNE_CHECK(device >= 0 && size_t(device) < cache.size(), "CUDA device {} is out of range", device);
  int count = cache[size_t(device)].load(std::memory_order_relaxed);
  if (count == 0) {
    gpu::check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    cache[size_t(device)].store(count, std::memory_order_relaxed);
  }
  return count;
}

// The scratch lives until the launch is queued; the stream-ordered allocator keeps it from reuse until the
// kernels that read it have run.
class Scratch {
 public:
  explicit Scratch(size_t nbytes) : data_(gpu::allocate(nbytes)), nbytes_(nbytes) {}
  ~Scratch() { gpu::release(data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  void* data_;
  size_t nbytes_;
};

template <GroupedGemmKind kind>
void launch(std::string_view op, const GroupedGemmProblem& problem, std::string_view shapes) {
  const int sm_count = multiprocessor_count();
  const Scratch scratch(grouped_gemm_scratch_bytes<kind>(problem.groups, sm_count));
  const std::string error =
      launch_grouped_gemm<kind>(problem, scratch.data(), scratch.nbytes(), sm_count, gpu::stream());
  MOETUNE_CHECK(error.empty(), "{} of {}: {}", op, shapes, error);
}

}  // namespace

void grouped_matmul(const Tensor& x, const Tensor& weights, bool transpose_w, const Tensor& offsets, const Tensor& out,
                    float alpha, bool accumulate) {
  constexpr std::string_view op = "grouped_matmul";
  check_matrix(op, "x", x, 2);
  check_matrix(op, "weights", weights, 3);
  check_matrix(op, "out", out, 2);
  check_same_device(op, {&x, &weights, &offsets, &out});
  const int64_t rows = x.size(0), groups = weights.size(0);
  const int64_t n = transpose_w ? weights.size(1) : weights.size(2);
  const int64_t k = transpose_w ? weights.size(2) : weights.size(1);
  MOETUNE_CHECK(x.size(1) == k && out.size(0) == rows && out.size(1) == n,
                "grouped_matmul: x {} · weights {}{} into out {}: shapes disagree", x.str(), weights.str(),
                transpose_w ? "ᵀ" : "", out.str());
  check_inner_size(op, "K", k);
  check_inner_size(op, "N", n);
  check_offsets(op, offsets, groups, rows);
  if (rows == 0 || groups == 0) return;  // no group has a row to write

  const GroupedGemmProblem problem{.a = x.raw_data(), .b = weights.raw_data(), .out = out.raw_data(),
                                   .offsets = static_cast<const int32_t*>(offsets.raw_data()), .rows = rows, .groups = int(groups),
                                   .n = int(n), .k = int(k), .accumulate = accumulate, .alpha = alpha};
  const std::string shapes = fmt::format("x {}, weights {}{}", x.str(), weights.str(), transpose_w ? "ᵀ" : "");
  if (transpose_w) launch<GroupedGemmKind::RowsTimesWeightT>(op, problem, shapes);
  else launch<GroupedGemmKind::RowsTimesWeight>(op, problem, shapes);
}

int64_t grouped_weight_grad_norm_slots(const Tensor& dw) {
  MOETUNE_CHECK(dw.dim() == 3, "grouped_weight_grad_norm_slots: dw {} is not [experts, n, k]", dw.str());
  return grouped_weight_grad_norm_slots(int(dw.size(0)), int(dw.size(1)), int(dw.size(2)));
}

void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& offsets, const Tensor& dw,
                                bool accumulate, const Tensor& norm_partials) {
  constexpr std::string_view op = "grouped_matmul_weight_grad";
  check_matrix(op, "dy", dy, 2);
  check_matrix(op, "x", x, 2);
  check_matrix(op, "dw", dw, 3);
  check_same_device(op, {&dy, &x, &offsets, &dw});
  const int64_t rows = x.size(0), groups = dw.size(0), n = dy.size(1), k = x.size(1);
  MOETUNE_CHECK(dy.size(0) == rows && dw.size(1) == n && dw.size(2) == k,
                "grouped_matmul_weight_grad: dy {}ᵀ · x {} into dw {}: shapes disagree", dy.str(), x.str(), dw.str());
  check_inner_size(op, "K", k);
  check_inner_size(op, "N", n);
  check_offsets(op, offsets, groups, rows);
  if (norm_partials.defined()) {
    check_operand(op, "norm_partials", norm_partials, 1, DType::F32);
    check_same_device(op, {&dw, &norm_partials});
    MOETUNE_CHECK(!accumulate, "{}: norm partials need an overwriting product (accumulate off): an accumulated "
                  "dW's empty groups keep sums no tile visits", op);
    MOETUNE_CHECK(norm_partials.numel() == grouped_weight_grad_norm_slots(dw), "{}: norm_partials {} for dw {}, expected [{}]",
                  op, norm_partials.str(), dw.str(), grouped_weight_grad_norm_slots(dw));
  }
  if (groups == 0) return;
  if (rows == 0) {  // every group is empty
    if (!accumulate) gpu::check(cudaMemsetAsync(dw.raw_data(), 0, dw.nbytes(), gpu::stream()), "zeroing dw");
    if (norm_partials.defined())
      gpu::check(cudaMemsetAsync(norm_partials.raw_data(), 0, norm_partials.nbytes(), gpu::stream()), "zeroing norm_partials");
    return;
  }

  const GroupedGemmProblem problem{.a = dy.raw_data(), .b = x.raw_data(), .out = dw.raw_data(),
                                   .offsets = static_cast<const int32_t*>(offsets.raw_data()), .rows = rows, .groups = int(groups),
                                   .n = int(n), .k = int(k), .accumulate = accumulate,
                                   .norm_partials = norm_partials.defined() ? static_cast<float*>(norm_partials.raw_data()) : nullptr};
  launch<GroupedGemmKind::WeightGrad>(op, problem, fmt::format("dy {}ᵀ, x {}", dy.str(), x.str()));
}

}  // namespace moetune::ops::cuda
