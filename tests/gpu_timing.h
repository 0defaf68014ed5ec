// Wall-clock timing of GPU work for the DISABLED_ speed tests: a few warm-up runs (graph building, allocator
// pools), then the mean of back-to-back runs, with the GPU synchronised before and after.
#pragma once

#include <chrono>
#include <functional>

#include "moetune/core/cuda_runtime.h"

namespace moetune::testing {

inline double mean_gpu_ms(const std::function<void()>& run, int warmups = 3, int runs = 20) {
  for (int i = 0; i < warmups; ++i) run();
  gpu::synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) run();
  gpu::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / runs;
}

}  // namespace moetune::testing
