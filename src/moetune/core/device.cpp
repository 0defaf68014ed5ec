#include "moetune/core/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "moetune/core/device_memory.h"
#include "moetune/core/error.h"

#if MOETUNE_HAVE_CUDA
#include <cuda_runtime.h>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/staged_upload.h"
#endif

namespace moetune {

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

#if MOETUNE_HAVE_CUDA
int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error so later calls report their own
    return 0;
  }
  return count;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("no usable GPU: {}", cudaGetErrorString(status));
  }
  return count == 0 ? "no GPU is visible to this process" : "";
}

int64_t cuda_total_memory_bytes() {
  if (cuda_device_count() == 0) return 0;
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return int64_t(total);
}
#else
int64_t cuda_total_memory_bytes() { return 0; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "moetune was built without CUDA (nvcc was not found)"; }
#endif

void* device_allocate(size_t nbytes, Device device) {
  if (device.is_cpu()) {
    // 64-byte alignment keeps every dtype and SIMD load aligned; aligned_alloc wants a multiple of it, and
    // an empty tensor still gets a real (unique, freeable) pointer.
    void* data = std::aligned_alloc(64, std::max<size_t>(64, (nbytes + 63) / 64 * 64));
    if (!data) throw std::bad_alloc();
    return data;
  }
#if MOETUNE_HAVE_CUDA
  MOETUNE_CHECK(device.index == 0, "cannot allocate on {}: one GPU per process for now", device.str());
  return gpu::allocate(nbytes);
#else
  fail("cannot allocate on {}: {}", device.str(), cuda_unavailable_reason());
#endif
}

void device_free(void* data, Device device) {
  if (device.is_cpu()) {
    std::free(data);
    return;
  }
#if MOETUNE_HAVE_CUDA
  gpu::release(data);
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
#if MOETUNE_HAVE_CUDA
  if (src_device.is_cpu() && dst_device.is_cuda() && nbytes >= kStagedUploadMinBytes) {
    staged_upload(dst, src, nbytes);  // a checkpoint's tensors: pinned buffers filled by several threads
    return;
  }
  // On the engine's stream, so the copy sees every kernel queued before it; the host then waits for it.
  gpu::check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, gpu::stream()), "cudaMemcpyAsync");
  gpu::synchronize("copy");
#else
  fail("cannot copy between {} and {}: {}", src_device.str(), dst_device.str(), cuda_unavailable_reason());
#endif
}

void zero_bytes(void* data, Device device, size_t nbytes) {
  if (nbytes == 0) return;
  if (device.is_cpu()) {
    std::memset(data, 0, nbytes);
    return;
  }
#if MOETUNE_HAVE_CUDA
  gpu::check(gpu::zero_async(data, nbytes, gpu::stream()), "zeroing GPU memory");
#else
  fail("cannot clear memory on {}: {}", device.str(), cuda_unavailable_reason());
#endif
}

}  // namespace moetune
