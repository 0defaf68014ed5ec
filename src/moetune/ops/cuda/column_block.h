// A block of columns of a row-major BF16 matrix on the GPU, for kernels that read or write their operand in
// place inside a wider tensor (the Mamba2 mixer's in_proj output holds z, xBC and dt side by side).
#pragma once

#include <cstdint>
#include <string_view>

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/gpu_tensor_checks.h"
#include "moetune/ops/cuda/mamba2_scan_kernels.h"

namespace moetune::ops::cuda {

struct ColumnBlock {
  Tensor tensor;  // [N, W] BF16 on the GPU
  int64_t first = 0, count = -1;  // columns [first, first + count); count -1: all of them

  ColumnBlock() = default;
  ColumnBlock(Tensor whole) : tensor(std::move(whole)) {}  // NOLINT: a whole tensor is its own block
  ColumnBlock(Tensor t, int64_t first_column, int64_t columns)
      : tensor(std::move(t)), first(first_column), count(columns) {}

  int64_t width() const { return count >= 0 ? count : (tensor.defined() && tensor.dim() == 2 ? tensor.size(1) : 0); }
};

// The block as a kernel operand, after checking that it is a BF16 GPU matrix of `rows` rows whose block is
// `columns` wide and lies inside it.
inline StridedBf16 strided_operand(std::string_view op, std::string_view name, const ColumnBlock& block,
                                   int64_t rows, int64_t columns) {
  check_gpu_tensor(op, name, block.tensor, {DType::BF16});
  const Tensor& t = block.tensor;
  MOETUNE_CHECK(t.dim() == 2 && t.size(0) == rows, "{}: {} {} must be a matrix of {} rows", op, name, t.str(), rows);
  MOETUNE_CHECK(block.width() == columns && block.first >= 0 && block.first + columns <= t.size(1),
                "{}: {} columns [{}, {}) of {} do not make the {} columns expected", op, name, block.first,
                block.first + block.width(), t.str(), columns);
  return {static_cast<char*>(t.raw_data()) + block.first * 2, t.size(1)};
}

}  // namespace moetune::ops::cuda
