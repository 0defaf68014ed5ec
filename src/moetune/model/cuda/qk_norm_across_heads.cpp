#include "moetune/model/cuda/qk_norm_across_heads.h"

#include <tuple>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {
namespace {

constexpr size_t kBf16 = 2;

// Columns [first, first + count) of `from` into columns [to_first, ...) of `to` (both BF16 [T, *] on the GPU).
void copy_columns(const Tensor& from, int64_t first, const Tensor& to, int64_t to_first, int64_t count) {
  gpu::copy_rows(static_cast<char*>(to.raw_data()) + size_t(to_first) * kBf16, size_t(to.size(1)) * kBf16,
                 static_cast<const char*>(from.raw_data()) + size_t(first) * kBf16, size_t(from.size(1)) * kBf16,
                 size_t(count) * kBf16, size_t(from.size(0)), "q/k norm across heads: column copy");
}

}  // namespace

Tensor qkv_normed_across_heads(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, double eps,
                               QkWidths widths) {
  const int64_t tokens = qkv.size(0), width = qkv.size(1);
  MOETUNE_CHECK(width == widths.q + 2 * widths.k, "q/k norm across heads: qkv {} is not {} + 2 · {} wide", qkv.str(),
                widths.q, widths.k);
  Tensor out = Tensor::empty({tokens, width}, DType::BF16, Device::cuda());
  Tensor q = Tensor::empty({tokens, widths.q}, DType::BF16, Device::cuda());
  Tensor k = Tensor::empty({tokens, widths.k}, DType::BF16, Device::cuda());
  ops::cuda::rms_norm_forward(ops::cuda::ColumnBlock(qkv, 0, widths.q), q_norm, eps, q);
  ops::cuda::rms_norm_forward(ops::cuda::ColumnBlock(qkv, widths.q, widths.k), k_norm, eps, k);
  copy_columns(q, 0, out, 0, widths.q);
  copy_columns(k, 0, out, widths.q, widths.k);
  copy_columns(qkv, widths.q + widths.k, out, widths.q + widths.k, widths.k);  // v as it is
  return out;
}

void qk_norm_across_heads_backward(const Tensor& dqkv, const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                                   double eps, QkWidths widths, const Tensor& dq_norm, const Tensor& dk_norm) {
  const int64_t tokens = qkv.size(0);
  for (const auto& [first, count, weight, dweight] :
       {std::tuple{int64_t(0), widths.q, &q_norm, &dq_norm}, std::tuple{widths.q, widths.k, &k_norm, &dk_norm}}) {
    // The normed values' gradient leaves dqkv for a tensor of its own, then the input's is written back over it.
    Tensor dy = Tensor::empty({tokens, count}, DType::BF16, Device::cuda());
    copy_columns(dqkv, first, dy, 0, count);
    ops::cuda::rms_norm_backward(dy, ops::cuda::ColumnBlock(qkv, first, count), *weight, eps,
                                 ops::cuda::ColumnBlock(dqkv, first, count), *dweight);
  }
}

}  // namespace moetune::model::cuda
