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

int64_t grad_norm_slots(const Tensor& grad) { return grad_norm_slot_count(grad.numel()); }

void grad_norm_partials(const std::vector<Tensor>& grads, const std::vector<int64_t>& first_slots, const Tensor& partials,
                        const MarkedRows* sparse) {
  MOETUNE_CHECK(first_slots.size() == grads.size(), "grad_norm_partials: {} gradients but {} first slots", grads.size(),
                first_slots.size());
  MOETUNE_CHECK(partials.defined() && partials.device().is_cuda() && partials.dtype() == DType::F32,
                "grad_norm_partials: partials is {}, expected F32 on cuda",
                partials.defined() ? partials.str() : std::string("undefined"));
  std::vector<GradNormTensor> tensors;
  tensors.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& grad = grads[i];
    MOETUNE_CHECK(grad.defined() && grad.device().is_cuda() && grad.dtype() == DType::BF16,
                  "grad_norm_partials: gradient {} is {}, expected BF16 on cuda", i,
                  grad.defined() ? grad.str() : std::string("undefined"));
    MOETUNE_CHECK(first_slots[i] >= 0 && first_slots[i] + grad_norm_slots(grad) <= partials.numel(),
                  "grad_norm_partials: gradient {}'s slots from {} do not fit in {} partials", i, first_slots[i],
                  partials.numel());
    tensors.push_back({.data = static_cast<const uint16_t*>(grad.raw_data()), .numel = grad.numel(), .first_slot = first_slots[i]});
  }
  if (sparse) {
    MOETUNE_CHECK(sparse->index < grads.size(), "grad_norm_partials: no gradient {} to read in rows", sparse->index);
    const Tensor& grad = grads[sparse->index];
    MOETUNE_CHECK(grad.dim() == 2 && sparse->marked.device().is_cuda() && sparse->marked.dtype() == DType::I32 &&
                      sparse->marked.shape() == Shape{grad.size(0)} && grad.size(1) > 0 &&
                      grad.size(1) < (int64_t(1) << 31),
                  "grad_norm_partials: row flags {} for the gradient {}", sparse->marked.str(), grad.str());
    tensors[sparse->index].row_marked = static_cast<const int32_t*>(sparse->marked.raw_data());
    tensors[sparse->index].row_length = grad.size(1);
  }
  gpu::check(launch_grad_norm_partials(tensors.data(), int64_t(tensors.size()), static_cast<float*>(partials.raw_data()),
                                       gpu::stream()),
             fmt::format("grad_norm_partials over {} tensors", tensors.size()));
}

void grad_norm_sum_partials(const Tensor& partials, const Tensor& norm_squared) {
  check_device_scalar(norm_squared, "grad_norm_sum_partials: norm_squared");
  MOETUNE_CHECK(partials.defined() && partials.device().is_cuda() && partials.dtype() == DType::F32,
                "grad_norm_sum_partials: partials is {}, expected F32 on cuda",
                partials.defined() ? partials.str() : std::string("undefined"));
  // Stream-ordered workspace: freed (back to the pool) after the kernels that use it, without waiting.
  const Tensor scratch = Tensor::empty({kFloatSumScratch}, DType::F32, Device::cuda());
  gpu::check(launch_float_sum(static_cast<const float*>(partials.raw_data()), partials.numel(),
                              static_cast<float*>(scratch.raw_data()), static_cast<float*>(norm_squared.raw_data()),
                              gpu::stream()),
             fmt::format("grad_norm_sum_partials over {} partials", partials.numel()));
}

void grad_norm_squared(const std::vector<Tensor>& grads, const Tensor& norm_squared, const MarkedRows* sparse,
                       const std::vector<Tensor>& precomputed) {
  check_device_scalar(norm_squared, "grad_norm_squared: norm_squared");
  int64_t slots = 0;
  for (const Tensor& given : precomputed) {
    MOETUNE_CHECK(given.defined() && given.device().is_cuda() && given.dtype() == DType::F32,
                  "grad_norm_squared: precomputed partials {} are not F32 on cuda",
                  given.defined() ? given.str() : std::string("undefined"));
    slots += given.numel();
  }
  std::vector<int64_t> first_slots;
  for (const Tensor& grad : grads) {
    first_slots.push_back(slots);
    slots += grad.defined() ? grad_norm_slots(grad) : 0;  // an undefined one fails in grad_norm_partials
  }
  // Stream-ordered workspace: freed (back to the pool) after the kernels that use it, without waiting.
  const Tensor partials = Tensor::empty({slots}, DType::F32, Device::cuda());
  int64_t at = 0;
  for (const Tensor& given : precomputed) {
    if (given.numel() > 0)
      gpu::check(cudaMemcpyAsync(static_cast<float*>(partials.raw_data()) + at, given.raw_data(), given.nbytes(),
                                 cudaMemcpyDeviceToDevice, gpu::stream()),
                 "grad_norm_squared: copying precomputed partials");
    at += given.numel();
  }
  grad_norm_partials(grads, first_slots, partials, sparse);
  grad_norm_sum_partials(partials, norm_squared);
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
