// The operands of the GPU op tests whose ops read and write in place inside wider tensors (the recurrent mixers'
// conv, scan, gated norm and rule, ops/cuda/column_block.h): random inputs at an offset in a wider tensor, outputs
// inside poisoned ones (a column the op forgets to write fails the comparison), and a block's CPU f32 copy.
#pragma once

#include "gpu_test_util.h"
#include "moetune/model/block_util.h"
#include "moetune/ops/cuda/column_block.h"

namespace moetune::testing {

// The block's columns as a CPU f32 tensor.
inline Tensor cpu_block(const ops::cuda::ColumnBlock& block) {
  return model::columns(to_cpu_f32(block.tensor), block.first, block.width());
}

class ColumnBlockGpuTest : public GpuTest {
 protected:
  Tensor random_gpu(const Shape& shape, float scale = 1.0f, DType dtype = DType::BF16) {
    return random_normal(shape, dtype, Device::cuda(), rng(), scale);
  }
  // A [rows, width] operand at columns [pad, pad + width) of a wider random tensor.
  ops::cuda::ColumnBlock random_block(int64_t rows, int64_t width, int64_t pad, float scale = 1.0f) {
    return {random_gpu({rows, width + 2 * pad + 1}, scale), pad, width};
  }
  ops::cuda::ColumnBlock poisoned_block(int64_t rows, int64_t width, int64_t pad) {
    return {poisoned({rows, width + pad + 3}, DType::BF16, Device::cuda()), pad, width};
  }
};

}  // namespace moetune::testing
