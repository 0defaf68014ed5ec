// Lets a kernel take up to the device's opt-in maximum of dynamic shared memory (beyond the default 48 KB), once
// per kernel and device. cudaFuncSetAttribute is reported to wait for the work in flight, so set before every
// launch it stalls the host once per launch: the profiled lm_head+loss phase measured 22.13 / 23.98 ms on the
// reference job / Moonlight with the attribute set per launch, 21.86 / 23.68 once per device (docs/benchmarks.md,
// session 7).
#pragma once

#include <cuda_runtime.h>

namespace moetune::gpu {

// The device's opt-in limit of dynamic shared memory a block (less nothing: static shared memory counts against
// the same limit, so a kernel with static shared memory must ask for less).
cudaError_t dynamic_shared_memory_limit(int& bytes);

// Sets cudaFuncAttributeMaxDynamicSharedMemorySize of `kernel` to the current device's opt-in limit less
// `static_bytes`, the first time it is asked for that kernel on that device; later calls only look it up.
cudaError_t allow_dynamic_shared_memory(const void* kernel, int static_bytes);

template <typename Kernel>
cudaError_t allow_dynamic_shared_memory(Kernel* kernel, int static_bytes) {
  return allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel), static_bytes);
}

}  // namespace moetune::gpu
