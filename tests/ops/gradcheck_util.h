// What the finite-difference op tests share: seeded random tensors, L = Σ w ⊙ y, and the central-difference
// check of an analytic gradient (tolerance 1e-2 on ‖a − b‖ / ‖b‖, as fp32 with h = 1e-2 allows).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "moetune/core/tensor.h"

namespace moetune::ops {
namespace {

std::mt19937 rng(7);  // per test file: each file's draws do not depend on the others'

[[maybe_unused]] Tensor random(Shape shape, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  Tensor t = Tensor::empty(std::move(shape), DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

[[maybe_unused]] double weighted_sum(const Tensor& y, const Tensor& w) {
  double total = 0;
  for (int64_t i = 0; i < y.numel(); ++i) total += double(y.data<float>()[i]) * w.data<float>()[i];
  return total;
}

// `input` is perturbed in place; `loss` recomputes L from it.
[[maybe_unused]] void expect_gradient(const char* what, const Tensor& input, const std::function<double()>& loss, const Tensor& analytic) {
  constexpr float h = 1e-2f;
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < input.numel(); ++i) {
    float& x = input.data<float>()[i];
    const float saved = x;
    x = saved + h;
    const double up = loss();
    x = saved - h;
    const double down = loss();
    x = saved;
    const double numeric = (up - down) / (2.0 * h);
    diff += (numeric - analytic.data<float>()[i]) * (numeric - analytic.data<float>()[i]);
    norm += numeric * numeric;
  }
  EXPECT_LE(std::sqrt(diff / norm), 1e-2) << what;
}

}  // namespace
}  // namespace moetune::ops
