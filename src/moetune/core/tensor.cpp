#include "moetune/core/tensor.h"

#include <cstring>

namespace moetune {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  return std::shared_ptr<Storage>(new Storage(device_allocate(nbytes, device), nbytes, device, nullptr));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes, Device device,
                                         std::shared_ptr<const void> owner) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(owner)));
}

Storage::~Storage() {
  if (!owner_) device_free(data_, device_);
}

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), byte_offset_(byte_offset), shape_(std::move(shape)), dtype_(dtype) {
  for (int64_t d : shape_) MOETUNE_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape_));
  MOETUNE_CHECK(byte_offset_ + nbytes() <= storage_->nbytes(),
                "tensor {} at byte {} does not fit its storage of {} bytes", str(), byte_offset_,
                storage_->nbytes());
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  size_t nbytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(Storage::allocate(nbytes, device), 0, std::move(shape), dtype);
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor tensor = empty(std::move(shape), dtype, device);
  zero_bytes(tensor.raw_data(), device, tensor.nbytes());
  return tensor;
}

int64_t Tensor::size(int64_t d) const {
  MOETUNE_CHECK(d >= -dim() && d < dim(), "dimension {} out of range for {}", d, str());
  return shape_[size_t(d < 0 ? d + dim() : d)];
}

std::string Tensor::str() const {
  return fmt::format("{}{} on {}", dtype_name(dtype_), shape_str(shape_), device().str());
}

void Tensor::check_access(DType expected) const {
  MOETUNE_CHECK(defined(), "access to an undefined tensor");
  MOETUNE_CHECK(dtype_ == expected, "tensor {} accessed as {}", str(), dtype_name(expected));
  MOETUNE_CHECK(device().is_cpu(), "tensor {} accessed from the host", str());
}

uint16_t* Tensor::data_u16() const {
  MOETUNE_CHECK(dtype_ == DType::BF16 || dtype_ == DType::F16, "tensor {} accessed as 16-bit floats", str());
  MOETUNE_CHECK(device().is_cpu(), "tensor {} accessed from the host", str());
  return static_cast<uint16_t*>(raw_data());
}

Tensor Tensor::view(Shape shape) const {
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      MOETUNE_CHECK(inferred < 0, "view {} of {}: more than one -1", shape_str(shape), str());
      inferred = int(i);
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0 && known > 0) shape[size_t(inferred)] = numel() / known;
  MOETUNE_CHECK(shape_numel(shape) == numel(), "cannot view {} as {}", str(), shape_str(shape));
  return Tensor(storage_, byte_offset_, std::move(shape), dtype_);
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  MOETUNE_CHECK(dim() >= 1 && start >= 0 && length >= 0 && start + length <= shape_[0],
                "narrow({}, {}) out of range for {}", start, length, str());
  Shape shape = shape_;
  shape[0] = length;
  int64_t row = shape_[0] ? numel() / shape_[0] : 0;
  return Tensor(storage_, byte_offset_ + size_t(start * row) * dtype_size(dtype_), std::move(shape), dtype_);
}

Tensor Tensor::operator[](int64_t index) const {
  Tensor row = narrow(index, 1);
  return row.view(Shape(shape_.begin() + 1, shape_.end()));
}

Tensor Tensor::flat_slice(int64_t element_offset, Shape shape) const {
  MOETUNE_CHECK(element_offset >= 0 && element_offset + shape_numel(shape) <= numel(),
                "flat slice {} at element {} out of range for {}", shape_str(shape), element_offset, str());
  return Tensor(storage_, byte_offset_ + size_t(element_offset) * dtype_size(dtype_), std::move(shape),
                dtype_);
}

Tensor Tensor::clone() const { return to(device()); }

Tensor Tensor::to(Device device) const {
  Tensor copy = empty(shape_, dtype_, device);
  copy.copy_from(*this);
  return copy;
}

void Tensor::copy_from(const Tensor& source) {
  MOETUNE_CHECK(source.dtype_ == dtype_ && source.numel() == numel(), "copy of {} into {}", source.str(),
                str());
  copy_bytes(raw_data(), device(), source.raw_data(), source.device(), nbytes());
}

bool Tensor::same_bytes(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ &&
         std::memcmp(raw_data(), other.raw_data(), nbytes()) == 0;
}

}  // namespace moetune
