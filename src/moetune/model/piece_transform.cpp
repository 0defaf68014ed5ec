#include "moetune/model/piece_transform.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "moetune/ops/cast.h"

namespace moetune::model {
namespace {

// Dimension 1 of `source` [outer, 2n, inner...] between interleaved pairs (a0, b0, a1, b1, ...) and halves
// (a0 .. a(n-1), b0 .. b(n-1)); bytes moved, any dtype.
Tensor reorder_pairs(const Tensor& source, bool to_halves) {
  const Shape& shape = source.shape();
  MOETUNE_CHECK(shape.size() >= 2 && shape[1] % 2 == 0, "an interleaved piece needs an even dimension 1, got {}",
                source.str());
  const int64_t outer = shape[0], rows = shape[1], half = rows / 2;
  const size_t row_bytes = size_t(source.numel() / std::max<int64_t>(1, outer * rows)) * dtype_size(source.dtype());
  Tensor out = Tensor::empty(shape, source.dtype());
  const auto* in = static_cast<const char*>(source.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t halves_row = (r % 2) * half + r / 2;  // where interleaved row r sits in the halves layout
      const int64_t from = to_halves ? r : halves_row, into = to_halves ? halves_row : r;
      std::memcpy(to + size_t(o * rows + into) * row_bytes, in + size_t(o * rows + from) * row_bytes, row_bytes);
    }
  return out;
}

// [batches, rows, cols] -> [batches, cols, rows] for one element type, in tiles so that both sides stay in cache
// (gpt-oss's MXFP4 experts are transposed twice on load, gigabytes per layer).
template <typename T>
void transpose_tiles(const T* in, T* out, int64_t batches, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  for (int64_t b = 0; b < batches; ++b, in += rows * cols, out += rows * cols)
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
      for (int64_t c0 = 0; c0 < cols; c0 += kTile)
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
          for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) out[c * rows + r] = in[r * cols + c];
}

// Which checkpoint row of a partially rotated head the engine keeps at row `r` (PartialRotary's order).
int64_t partial_rotary_source_row(int64_t r, const PartialRotary& rotary) {
  const int64_t half = rotary.head_dim / 2, rotating = rotary.rotary_dim / 2, passing = half - rotating;
  const int64_t second = r >= half ? 1 : 0, within = r - second * half;  // which half of the engine's head
  if (within >= rotating) return rotary.rotary_dim + second * passing + within - rotating;  // a passing row
  return rotary.interleaved ? 2 * within + second : second * rotating + within;             // a rotating row
}

// Dimension 0's rows between the checkpoint's order and the engine's: the engine keeps checkpoint row disk_row(r) at
// row r, for the first `count` rows (the rows past them keep their place). A copy, any dtype.
template <typename DiskRow>
Tensor move_rows(const Tensor& rows, int64_t count, bool to_engine, DiskRow disk_row) {
  const int64_t total = rows.size(0);
  const size_t row_bytes = size_t(rows.numel() / total) * dtype_size(rows.dtype());
  Tensor out = Tensor::empty(rows.shape(), rows.dtype());
  const auto* in = static_cast<const char*>(rows.raw_data());
  auto* to = static_cast<char*>(out.raw_data());
  std::memcpy(to + size_t(count) * row_bytes, in + size_t(count) * row_bytes, size_t(total - count) * row_bytes);
  for (int64_t r = 0; r < count; ++r) {
    const int64_t disk = disk_row(r), from = to_engine ? disk : r, into = to_engine ? r : disk;
    std::memcpy(to + size_t(into) * row_bytes, in + size_t(from) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace

Tensor reorder_partial_rotary_rows(const Tensor& rows, const PartialRotary& rotary, bool to_engine) {
  if (rotary.head_dim == 0) return rows;
  const int64_t count = rows.dim() == 0 ? 0 : rows.size(0);
  const int64_t rotated = rotary.rotated_rows == 0 ? count : rotary.rotated_rows;
  MOETUNE_CHECK(count > 0 && rotated <= count && rotated % rotary.head_dim == 0 && rotary.rotary_dim % 2 == 0 &&
                    rotary.head_dim % 2 == 0 && rotary.rotary_dim > 0 && rotary.rotary_dim <= rotary.head_dim,
                "partial RoPE rows: the first {} rows of {} are not a stack of heads of {} rows rotating {} of them",
                rotated, rows.str(), rotary.head_dim, rotary.rotary_dim);
  return move_rows(rows, rotated, to_engine, [&](int64_t r) {
    return r - r % rotary.head_dim + partial_rotary_source_row(r % rotary.head_dim, rotary);
  });
}

Tensor reorder_grouped_rows(const Tensor& rows, const GroupedRows& grouping, bool to_engine) {
  if (grouping.groups == 0) return rows;
  int64_t group_rows = 0;
  for (int64_t segment : grouping.segments) group_rows += segment;
  const int64_t count = rows.dim() == 0 ? 0 : rows.size(0);
  MOETUNE_CHECK(group_rows > 0 && count == grouping.groups * group_rows, "grouped rows: {} is not {} groups of {} rows",
                rows.str(), grouping.groups, group_rows);
  return move_rows(rows, count, to_engine, [&](int64_t r) {
    int64_t segment_start = 0, within_group = 0;  // the segment's first engine row, its offset in a group on disk
    for (int64_t segment : grouping.segments) {
      if (r < segment_start + grouping.groups * segment) {
        const int64_t offset = r - segment_start;
        return offset / segment * group_rows + within_group + offset % segment;
      }
      segment_start += grouping.groups * segment;
      within_group += segment;
    }
    return r;  // unreachable: count covers every segment
  });
}

Tensor reorder_interleaved_rows(const Tensor& matrix, bool to_halves) {
  MOETUNE_CHECK(matrix.dim() == 2, "reorder_interleaved_rows: {} is not a matrix", matrix.str());
  return reorder_pairs(matrix.view({1, matrix.size(0), matrix.size(1)}), to_halves).view(matrix.shape());
}

Tensor transpose_last_two(const Tensor& source) {
  const Shape& shape = source.shape();
  MOETUNE_CHECK(shape.size() >= 2, "a transposed piece needs two dimensions, got {}", source.str());
  Shape swapped = shape;
  std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
  Tensor out = Tensor::empty(swapped, source.dtype());
  const int64_t rows = shape[shape.size() - 2], cols = shape.back(), batches = source.numel() / std::max<int64_t>(1, rows * cols);
  const void* in = source.raw_data();
  void* to = out.raw_data();
  switch (dtype_size(source.dtype())) {  // bytes moved, whatever they mean
    case 1: transpose_tiles(static_cast<const uint8_t*>(in), static_cast<uint8_t*>(to), batches, rows, cols); break;
    case 2: transpose_tiles(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(to), batches, rows, cols); break;
    case 4: transpose_tiles(static_cast<const uint32_t*>(in), static_cast<uint32_t*>(to), batches, rows, cols); break;
    case 8: transpose_tiles(static_cast<const uint64_t*>(in), static_cast<uint64_t*>(to), batches, rows, cols); break;
    default: fail("transpose: elements of {} bytes", dtype_size(source.dtype()));
  }
  return out;
}

Shape engine_shape(const HfTensor& piece) {
  Shape shape = piece.shape;
  if (piece.transposed && shape.size() >= 2) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  return shape;
}

void piece_to_engine(const Tensor& hf, const HfTensor& piece, const Tensor& destination) {
  const Tensor oriented = piece.transposed ? transpose_last_two(hf) : hf;
  const Tensor paired = piece.interleaved_pairs ? reorder_pairs(oriented, /*to_halves=*/true) : oriented;
  const Tensor grouped = reorder_grouped_rows(paired, piece.grouped_rows, /*to_engine=*/true);
  ops::cast_into(reorder_partial_rotary_rows(grouped, piece.partial_rotary, /*to_engine=*/true), destination);
}

Tensor piece_to_hf(const Tensor& engine_view, const HfTensor& piece, DType disk_dtype) {
  const Tensor cast = engine_view.dtype() == disk_dtype ? engine_view : ops::cast(engine_view, disk_dtype);
  const Tensor rows = reorder_grouped_rows(reorder_partial_rotary_rows(cast, piece.partial_rotary, /*to_engine=*/false),
                                           piece.grouped_rows, /*to_engine=*/false);
  const Tensor paired = piece.interleaved_pairs ? reorder_pairs(rows, /*to_halves=*/false) : rows;
  return piece.transposed ? transpose_last_two(paired) : paired;
}

}  // namespace moetune::model
