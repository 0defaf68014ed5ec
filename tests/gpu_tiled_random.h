// A large bf16 matrix of normal values for the GPU timing tests, without drawing every value on the host: one
// random block of at most 8 M values, repeated down the rows on the device.
#pragma once

#include <algorithm>
#include <random>

#include "gpu_test_util.h"
#include "moetune/core/cuda_runtime.h"

namespace moetune::testing {

inline Tensor tiled_random(int64_t rows, int64_t cols, std::mt19937& rng, float scale) {
  const int64_t block_rows = std::clamp<int64_t>((int64_t(1) << 23) / cols, 1, rows);
  const Tensor block = random_normal({block_rows, cols}, DType::BF16, Device::cuda(), rng, scale);
  const Tensor out = Tensor::empty({rows, cols}, DType::BF16, Device::cuda());
  for (int64_t start = 0; start < rows; start += block_rows) {
    const int64_t length = std::min(block_rows, rows - start);
    gpu::check(cudaMemcpyAsync(out.narrow(start, length).raw_data(), block.raw_data(), size_t(length * cols * 2),
                               cudaMemcpyDeviceToDevice, gpu::stream()),
               "copy");
  }
  return out;
}

}  // namespace moetune::testing
