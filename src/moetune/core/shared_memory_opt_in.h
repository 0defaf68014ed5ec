// Lets a kernel take up to the device's opt-in maximum of dynamic shared memory (beyond the default 48 KB), once
// per kernel and device. cudaFuncSetAttribute is reported to wait for the work in flight, so set before every
// launch it stalls the host once per launch: the profiled lm_head+loss phase measured 22.13 / 23.98 ms on the
// reference job / Moonlight with the attribute set per launch, 21.86 / 23.68 once per device (docs/benchmarks.md,
// session 7).
#pragma once

#include <cuda_runtime.h>

namespace moetune::gpu {

// The current device's opt-in limit of shared memory a block, static and dynamic together.
cudaError_t dynamic_shared_memory_limit(int& bytes);

// Sets cudaFuncAttributeMaxDynamicSharedMemorySize of `kernel` to the current device's opt-in limit less the
// kernel's own static shared memory, the first time it is asked for that kernel on that device; later calls only
// look it up. A launch asking for more than that still fails, at the launch.
cudaError_t allow_dynamic_shared_memory(const void* kernel);

template <typename Kernel>
cudaError_t allow_dynamic_shared_memory(Kernel* kernel) {
  return allow_dynamic_shared_memory(reinterpret_cast<const void*>(kernel));
}

}  // namespace moetune::gpu
