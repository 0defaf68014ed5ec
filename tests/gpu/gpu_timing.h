// Event timing for the GPU benchmarks run as DISABLED_ tests: the mean of `reps` calls on the engine's stream after
// one warm-up call (kernel attributes, GEMM heuristics).
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "moetune/core/cuda_runtime.h"

namespace moetune::testing {

inline float time_ms(const std::function<void()>& fn, int reps = 5) {
  fn();
  gpu::synchronize();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, gpu::stream());
  for (int i = 0; i < reps; ++i) fn();
  cudaEventRecord(stop, gpu::stream());
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / float(reps);
}

}  // namespace moetune::testing
