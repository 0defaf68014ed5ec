// Argument checks shared by the routing ops' Tensor wrappers (router, permute, aux_loss): each failure names
// the op and the tensor at fault.
#pragma once

#include <string_view>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

inline void expect_gpu_tensor(const Tensor& t, std::string_view op, std::string_view name) {
  MOETUNE_CHECK(t.defined(), "{}: {} is undefined", op, name);
  MOETUNE_CHECK(t.device().is_cuda(), "{}: {} must be on the GPU, got {}", op, name, t.str());
}

inline void expect_gpu_tensor(const Tensor& t, std::string_view op, std::string_view name, DType dtype,
                              const Shape& shape) {
  expect_gpu_tensor(t, op, name);
  MOETUNE_CHECK(t.dtype() == dtype && t.shape() == shape, "{}: {} must be {}{}, got {}", op, name, dtype_name(dtype),
                shape_str(shape), t.str());
}

// A GPU tensor's elements for a kernel launcher (Tensor::data<T>() is for host access only); null when the
// tensor is undefined, which is how the launchers take optional inputs.
template <typename T>
T* device_data(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

}  // namespace moetune::ops::cuda
