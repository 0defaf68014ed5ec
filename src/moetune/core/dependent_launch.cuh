// Programmatic dependent launch (Hopper and later): a kernel launched by launch_dependent may be scheduled while
// the kernel before it in the stream is still finishing, instead of only after the GPU has seen it finish. Its
// first statement must be wait_for_previous_kernel(): that returns once the previous kernel has finished and its
// writes are visible, so nothing the kernel reads or writes in global memory can race with it; and since every
// kernel launched this way waits, a kernel's completion still implies that of every kernel before it in the stream.
// Measured on the H200 (docs/benchmarks.md, session 19): back-to-back tiny kernels 3.92 -> 3.35 us each; 33 MB
// streaming kernels behind a GEMM 1.8 us sooner each; Moonlight's step idle 0.66 -> 0.50 ms; session 20: GPT-OSS's
// step +0.6%, host-bound decoding of the tiny models 1.07-1.20x (medians of alternated pairs). Every kernel of
// moetune's own launches this way; cuBLASLt's, cuDNN's and CUTLASS's grouped kernels (whose sm90 array kernels do not
// wait) are launched plainly.
// Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "moetune/core/dependent_launch.h"

namespace moetune::gpu {

// The first statement of every kernel that launch_dependent launches; no-op where the kernel was launched
// plainly and below compute capability 9.0.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The launch attribute that makes a launch dependent (for launches that carry other attributes too).
inline cudaLaunchAttribute dependent_launch_attribute() {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  return attribute;
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), allowed to start before the previous kernel ends. A kernel
// template is passed with all its arguments named (kernel<T, N>): it is taken as a function pointer, so the call's
// arguments cannot deduce them as they do for <<<>>>.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                             Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute = dependent_launch_attribute();
  config.attrs = &attribute;
  config.numAttrs = dependent_launch_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace moetune::gpu
