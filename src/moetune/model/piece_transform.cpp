#include "moetune/model/piece_transform.h"

#include <cstring>

#include "moetune/ops/cast.h"

namespace moetune::model {
namespace {

// `source` [..., rows, cols] -> a new [..., cols, rows] tensor of the same dtype (bytes moved, any dtype).
Tensor transpose_last_two(const Tensor& source) {
  const Shape& shape = source.shape();
  MOETUNE_CHECK(shape.size() >= 2, "a transposed piece needs two dimensions, got {}", source.str());
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor out = Tensor::empty(swapped, source.dtype());
  const int64_t rows = shape[shape.size() - 2], cols = shape.back(), batches = source.numel() / std::max<int64_t>(1, rows * cols);
  const size_t element = dtype_size(source.dtype());
  const auto* in = static_cast<const char*>(source.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  for (int64_t b = 0; b < batches; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        std::memcpy(to + ((b * cols + c) * rows + r) * element, in + ((b * rows + r) * cols + c) * element, element);
  return out;
}

}  // namespace

Shape engine_shape(const HfTensor& piece) {
  Shape shape = piece.shape;
  if (piece.transposed && shape.size() >= 2) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return shape;
}

void piece_to_engine(const Tensor& hf, const HfTensor& piece, const Tensor& destination) {
  ops::cast_into(piece.transposed ? transpose_last_two(hf) : hf, destination);
}

Tensor piece_to_hf(const Tensor& engine_view, const HfTensor& piece, DType disk_dtype) {
  const Tensor cast = engine_view.dtype() == disk_dtype ? engine_view : ops::cast(engine_view, disk_dtype);
  return piece.transposed ? transpose_last_two(cast) : cast;
}

}  // namespace moetune::model
