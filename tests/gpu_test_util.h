// Helpers for the GPU op tests (CPU reference vs CUDA): fresh random inputs each run, outputs poisoned before
// the call, and the relative error ‖a−b‖/‖b‖ with NaN never passing. Every GPU test fixture skips itself,
// with the reason, when no GPU is present.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::testing {

// Derive a test fixture from this (or call skip_without_gpu() in SetUp): the whole test is then skipped with
// "GPU test skipped: <why>" on machines without a GPU.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  // A fresh seed each run (printed on failure through SCOPED_TRACE in the test body, via seed()).
  std::mt19937& rng() { return rng_; }
  uint32_t seed() const { return seed_; }

 private:
  uint32_t seed_ = std::random_device{}();
  std::mt19937 rng_{seed_};
};

// Normal(0, scale²) values of the given dtype on the given device (drawn in f32 on the host, then cast).
Tensor random_normal(const Shape& shape, DType dtype, Device device, std::mt19937& rng, float scale = 1.0f);
// A tensor whose every byte is 0xFF: NaN in f32/bf16/f16, -1 in integers. Outputs start like this so that
// an element a kernel forgets to write fails the comparison.
Tensor poisoned(const Shape& shape, DType dtype, Device device);
// A CPU f32 copy of any float tensor (bf16/f16/f32, CPU or GPU).
Tensor to_cpu_f32(const Tensor& t);
// ‖actual − expected‖₂ / ‖expected‖₂ in double; +inf when `actual` holds a NaN or Inf, or the shapes differ.
double relative_error(const Tensor& actual, const Tensor& expected);

// Each token's document start for documents of these lengths laid end to end (flash attention's input).
std::vector<int64_t> document_starts(const std::vector<int64_t>& lengths);

// Tolerances for a GPU result in bf16 (or bf16 inputs, fp32 accumulation) against the fp32 CPU reference.
inline constexpr double kBf16Tolerance = 1e-2;

}  // namespace moetune::testing
