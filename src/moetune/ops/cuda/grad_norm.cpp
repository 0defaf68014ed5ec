#include "moetune/ops/cuda/grad_norm.h"

#include <cmath>

#include "moetune/core/cuda_runtime.h"
#include "moetune/ops/cuda/grad_norm_kernels.h"

namespace moetune::ops::cuda {
namespace {

void check_device_scalar(const Tensor& tensor, const char* what) {
  MOETUNE_CHECK(tensor.defined() && tensor.device().is_cuda() && tensor.dtype() == DType::F32 && tensor.numel() == 1,
                "{} is {}, expected F32 with one element on cuda", what,
                tensor.defined() ? tensor.str() : std::string("undefined"));
}

}  // namespace

void grad_norm_squared(const std::vector<Tensor>& grads, const Tensor& norm_squared, const MarkedRows* sparse) {
  check_device_scalar(norm_squared, "grad_norm_squared: norm_squared");
  std::vector<GradNormTensor> tensors;
  tensors.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& grad = grads[i];
    MOETUNE_CHECK(grad.defined() && grad.device().is_cuda() && grad.dtype() == DType::BF16,
                  "grad_norm_squared: gradient {} is {}, expected BF16 on cuda", i,
                  grad.defined() ? grad.str() : std::string("undefined"));
    tensors.push_back({.data = static_cast<const uint16_t*>(grad.raw_data()), .numel = grad.numel()});
  }
  if (sparse) {
    MOETUNE_CHECK(sparse->index < grads.size(), "grad_norm_squared: no gradient {} to read in rows", sparse->index);
    const Tensor& grad = grads[sparse->index];
    MOETUNE_CHECK(grad.dim() == 2 && sparse->marked.device().is_cuda() && sparse->marked.dtype() == DType::I32 &&
                      sparse->marked.shape() == Shape{grad.size(0)} && grad.size(1) > 0,
                  "grad_norm_squared: row flags {} for the gradient {}", sparse->marked.str(), grad.str());
    tensors[sparse->index].row_marked = static_cast<const int32_t*>(sparse->marked.raw_data());
    tensors[sparse->index].row_length = grad.size(1);
  }
  const int64_t count = int64_t(tensors.size());
  // Stream-ordered workspace: freed (back to the pool) after the kernels that use it, without waiting.
  const Tensor partials = Tensor::empty({grad_norm_partial_count(tensors.data(), count)}, DType::F32, Device::cuda());
  gpu::check(launch_grad_norm_squared(tensors.data(), count, static_cast<float*>(partials.raw_data()),
                                      static_cast<float*>(norm_squared.raw_data()), gpu::stream()),
             fmt::format("grad_norm_squared over {} tensors", count));
}

void clip_coefficient(const Tensor& norm_squared, double max_norm, const Tensor& coefficient) {
  check_device_scalar(norm_squared, "clip_coefficient: norm_squared");
  check_device_scalar(coefficient, "clip_coefficient: coefficient");
  MOETUNE_CHECK(std::isfinite(max_norm) && max_norm > 0, "clip_coefficient: max_norm {} must be positive", max_norm);
  gpu::check(launch_clip_coefficient(static_cast<const float*>(norm_squared.raw_data()), max_norm,
                                     static_cast<float*>(coefficient.raw_data()), gpu::stream()),
             "clip_coefficient");
}

}  // namespace moetune::ops::cuda
