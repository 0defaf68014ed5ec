// Argument checks shared by the Tensor-level wrappers of the GPU ops: each failure is an Error naming the op,
// the argument and what it is, before anything is queued on the stream.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// `tensor` is defined and on a GPU.
inline void check_gpu_tensor(std::string_view op, std::string_view name, const Tensor& tensor) {
  MOETUNE_CHECK(tensor.defined(), "{}: {} is undefined", op, name);
  MOETUNE_CHECK(tensor.device().is_cuda(), "{}: {} {} must be on the GPU", op, name, tensor.str());
}

// ... and of one of `dtypes`.
inline void check_gpu_tensor(std::string_view op, std::string_view name, const Tensor& tensor,
                             std::initializer_list<DType> dtypes) {
  check_gpu_tensor(op, name, tensor);
  bool dtype_ok = false;
  for (DType dtype : dtypes) dtype_ok = dtype_ok || tensor.dtype() == dtype;
  MOETUNE_CHECK(dtype_ok, "{}: {} {} has an unsupported dtype", op, name, tensor.str());
}

inline void check_shape(std::string_view op, std::string_view name, const Tensor& tensor, const Shape& expected) {
  MOETUNE_CHECK(tensor.shape() == expected, "{}: {} is {}, expected shape {}", op, name, tensor.str(),
                shape_str(expected));
}

// ... of exactly `dtype` and `shape`.
inline void check_gpu_tensor(std::string_view op, std::string_view name, const Tensor& tensor, DType dtype,
                             const Shape& shape) {
  check_gpu_tensor(op, name, tensor, {dtype});
  check_shape(op, name, tensor, shape);
}

// A GPU tensor's elements for a kernel launcher (Tensor::data<T>() is for host access only); null when the
// tensor is undefined, which is how the launchers take optional inputs.
template <typename T>
T* device_data(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// The kernels index with int64 but launch grids of at most 2^31 - 1 blocks and count some things in int.
inline void check_fits_int32(std::string_view op, std::string_view what, int64_t value) {
  MOETUNE_CHECK(value >= 0 && value <= INT32_MAX, "{}: {} = {} does not fit the kernel's int32 range", op, what,
                value);
}

// True when the byte ranges of two tensors overlap (an output that must not alias an input).
inline bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return false;
  const auto* a0 = static_cast<const char*>(a.raw_data());
  const auto* b0 = static_cast<const char*>(b.raw_data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

}  // namespace moetune::ops::cuda
