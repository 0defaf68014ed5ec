// Tensor: a dtype, a shape and a window onto a block of bytes (Storage) on one device. Storage is always
// contiguous, row-major; views (reshape, narrow along dim 0, a flat slice) share the bytes and cost nothing.
// Arithmetic lives in ops/; this type only knows memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moetune/core/device.h"
#include "moetune/core/dtype.h"
#include "moetune/core/error.h"

namespace moetune {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

// A block of bytes. Either owned (allocated here, freed on destruction) or borrowed from an owner that
// the storage keeps alive (a memory-mapped file, for zero-copy reads of a checkpoint).
class Storage {
 public:
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  static std::shared_ptr<Storage> borrow(void* data, size_t nbytes, Device device,
                                         std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device, std::shared_ptr<const void> owner)
      : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  std::shared_ptr<const void> owner_;  // null when the storage owns data_
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype);

  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu());
  // A CPU tensor holding a copy of `values`.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  std::string str() const;  // "BF16[4, 8] on cpu"

  void* raw_data() const { return static_cast<char*>(storage_->data()) + byte_offset_; }
  // Typed access to a CPU tensor; fails if T is not the tensor's dtype.
  template <typename T>
  T* data() const {
    check_access(dtype_of<T>());
    return static_cast<T*>(raw_data());
  }
  uint16_t* data_u16() const;  // bf16 / f16 bits

  // Views sharing this tensor's bytes.
  Tensor view(Shape shape) const;  // one dimension may be -1
  Tensor narrow(int64_t start, int64_t length) const;  // rows [start, start+length) of dim 0
  Tensor operator[](int64_t index) const;  // row `index` of dim 0, one dimension fewer
  Tensor flat_slice(int64_t element_offset, Shape shape) const;  // a run of the flat elements

  // Copies of the bytes (same dtype). copy_from needs equal numel and dtype; devices may differ.
  Tensor clone() const;
  Tensor to(Device device) const;
  void copy_from(const Tensor& source);

  bool same_bytes(const Tensor& other) const;  // same dtype, shape and every byte (CPU tensors)

 private:
  void check_access(DType expected) const;
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  Tensor tensor = empty(std::move(shape), dtype_of<T>());
  MOETUNE_CHECK(size_t(tensor.numel()) == values.size(), "from_vector: {} values for shape {}",
                values.size(), shape_str(tensor.shape()));
  std::copy(values.begin(), values.end(), tensor.data<T>());
  return tensor;
}

}  // namespace moetune
