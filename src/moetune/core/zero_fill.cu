// zero_async (core/cuda_runtime.h): small clears as a kernel. cudaMemsetAsync costs ~3 µs of GPU timeline for a
// few bytes (Moonlight's step, session 18: 4.45 µs from the kernel before to the kernel after a memset, 1.55 µs
// between two kernels; TransformerEngine measured the same, ~3.2 against ~0.8 µs, and clears small buffers with a
// kernel for it); a step queues ~40 of its own (zero_grad's runs, the experts' norm slots, small counters).
#include <cstdint>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/dependent_launch.cuh"

namespace moetune::gpu {
namespace {

constexpr int kThreads = 256;
constexpr size_t kKernelLimit = size_t(1) << 20;  // larger clears are bandwidth, where the memset does as well

// 16-byte stores over the aligned middle, single bytes before and after it.
__global__ void zero_fill_kernel(unsigned char* __restrict__ data, size_t nbytes) {
  wait_for_previous_kernel();
  const size_t to_aligned = (16 - reinterpret_cast<uintptr_t>(data) % 16) % 16;
  const size_t head = to_aligned < nbytes ? to_aligned : nbytes;
  const size_t vectors = (nbytes - head) / 16, tail = head + vectors * 16;
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
  uint4* middle = reinterpret_cast<uint4*>(data + head);
  for (size_t v = i; v < vectors; v += stride) middle[v] = make_uint4(0, 0, 0, 0);
  if (i < head) data[i] = 0;
  if (i < nbytes - tail) data[tail + i] = 0;
}

}  // namespace

cudaError_t zero_async(void* data, size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return cudaSuccess;
  if (nbytes > kKernelLimit) return cudaMemsetAsync(data, 0, nbytes, stream);
  const size_t vectors = nbytes / 16 + 1;
  const unsigned blocks = unsigned((vectors + kThreads - 1) / kThreads);
  return launch_dependent(zero_fill_kernel, blocks, kThreads, 0, stream, static_cast<unsigned char*>(data), nbytes);
}

}  // namespace moetune::gpu
