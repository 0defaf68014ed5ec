#include "moetune/model/cuda/padded_experts.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/elementwise.h"

namespace moetune::model::cuda {
namespace {

// `height` runs of `width` elements from src (runs `src_pitch` elements apart) to dst (`dst_pitch` apart).
void copy_runs(const Tensor& src, int64_t src_pitch, const Tensor& dst, int64_t dst_pitch, int64_t width,
               int64_t height) {
  MOETUNE_CHECK(src.dtype() == dst.dtype(), "padded experts: {} and {} differ in dtype", src.str(), dst.str());
  const size_t element = dtype_size(src.dtype());
  gpu::copy_rows(dst.raw_data(), size_t(dst_pitch) * element, src.raw_data(), size_t(src_pitch) * element,
                 size_t(width) * element, size_t(height), "padded experts copy");
}

}  // namespace

Tensor pad_expert_rows(const Tensor& up, int64_t padded) {
  const int64_t experts = up.size(0), inner = up.size(1), width = up.size(2);
  Tensor out = Tensor::zeros({experts, padded, width}, up.dtype(), Device::cuda());
  copy_runs(up, inner * width, out, padded * width, inner * width, experts);
  return out;
}

Tensor pad_expert_columns(const Tensor& down, int64_t padded) {
  const int64_t experts = down.size(0), width = down.size(1), inner = down.size(2);
  Tensor out = Tensor::zeros({experts, width, padded}, down.dtype(), Device::cuda());
  copy_runs(down, inner, out, padded, inner, experts * width);
  return out;
}

void add_cut_expert_rows(const Tensor& padded, const Tensor& into) {
  const int64_t experts = into.size(0), inner = into.size(1), width = into.size(2);
  Tensor cut = Tensor::empty(into.shape(), into.dtype(), Device::cuda());
  copy_runs(padded, padded.size(1) * width, cut, inner * width, inner * width, experts);
  ops::cuda::add(into, cut, into);
}

void add_cut_expert_columns(const Tensor& padded, const Tensor& into) {
  const int64_t experts = into.size(0), width = into.size(1), inner = into.size(2);
  Tensor cut = Tensor::empty(into.shape(), into.dtype(), Device::cuda());
  copy_runs(padded, padded.size(2), cut, inner, inner, experts * width);
  ops::cuda::add(into, cut, into);
}

}  // namespace moetune::model::cuda
