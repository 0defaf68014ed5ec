#include "moetune/ops/cuda/embedding.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/embedding_kernels.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"

namespace moetune::ops::cuda {
namespace {

// The kernels launch one block per sorted position and tile wide rows over gridDim.y (at most 65535 tiles).
constexpr int64_t kMaxHidden = int64_t(1) << 22;

void check_table(std::string_view op, std::string_view name, const Tensor& table, std::initializer_list<DType> dtypes) {
  check_gpu_tensor(op, name, table, dtypes);
  MOETUNE_CHECK(table.dim() == 2, "{}: {} {} must be [V, H]", op, name, table.str());
  MOETUNE_CHECK(table.size(1) <= kMaxHidden, "{}: {} {} has rows wider than the kernel supports ({})", op, name,
                table.str(), kMaxHidden);
  check_fits_int32(op, "the vocabulary size", table.size(0));
}

int64_t checked_ids(std::string_view op, const Tensor& ids) {
  check_gpu_tensor(op, "ids", ids, {DType::I32});
  MOETUNE_CHECK(ids.dim() == 1, "{}: ids {} must be [T]", op, ids.str());
  check_fits_int32(op, "the token count", ids.size(0));
  return ids.size(0);
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, float scale) {
  constexpr std::string_view op = "embedding_forward";
  const int64_t tokens = checked_ids(op, ids);
  check_table(op, "table", table, {DType::BF16});
  check_gpu_tensor(op, "out", out, {DType::BF16});
  check_shape(op, "out", out, {tokens, table.size(1)});
  MOETUNE_CHECK(!overlaps(out, table) && !overlaps(out, ids), "{}: out {} overlaps an input", op, out.str());
  gpu::check(launch_embedding_forward(static_cast<const int32_t*>(ids.raw_data()), table.raw_data(), out.raw_data(),
                                      tokens, table.size(0), table.size(1), scale, gpu::stream()),
             "embedding_forward kernel");
}

void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, int64_t padding_row, float scale) {
  constexpr std::string_view op = "embedding_backward";
  const int64_t tokens = checked_ids(op, ids);
  check_table(op, "dtable", dtable, {DType::BF16, DType::F32});
  check_gpu_tensor(op, "dout", dout, {DType::BF16});
  check_shape(op, "dout", dout, {tokens, dtable.size(1)});
  MOETUNE_CHECK(!overlaps(dtable, dout) && !overlaps(dtable, ids), "{}: dtable {} overlaps an input", op,
                dtable.str());
  if (tokens == 0 || dtable.size(1) == 0) return;
  const size_t workspace_bytes = embedding_backward_workspace_bytes(tokens, dtable.size(0));
  void* workspace = gpu::allocate(workspace_bytes);
  const cudaError_t status = launch_embedding_backward(
      dout.raw_data(), static_cast<const int32_t*>(ids.raw_data()), dtable.raw_data(), dtable.dtype() == DType::BF16,
      tokens, dtable.size(0), dtable.size(1), padding_row, scale, workspace, workspace_bytes, gpu::stream());
  gpu::release(workspace);  // stream-ordered: after the sort and the sums above
  gpu::check(status, "embedding_backward kernels");
}

}  // namespace moetune::ops::cuda
