#include "moetune/core/cuda_runtime.h"

#include <cstdint>
#include <mutex>

#include "moetune/core/error.h"

namespace moetune::gpu {
namespace {

// The device's default memory pool, told to keep what is freed (the default gives it back to the driver at
// every synchronisation, which would make each step pay for cudaMalloc again).
cudaMemPool_t pool() {
  static cudaMemPool_t handle = [] {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    cudaMemPool_t p = nullptr;
    check(cudaDeviceGetDefaultMemPool(&p, device), "cudaDeviceGetDefaultMemPool");
    uint64_t keep_everything = UINT64_MAX;
    check(cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &keep_everything), "cudaMemPoolSetAttribute");
    return p;
  }();
  return handle;
}

size_t pool_attribute(cudaMemPoolAttr attribute) {
  uint64_t value = 0;
  check(cudaMemPoolGetAttribute(pool(), attribute, &value), "cudaMemPoolGetAttribute");
  return size_t(value);
}

}  // namespace

namespace {
thread_local cudaStream_t current_stream = nullptr;  // null: the engine's stream
}  // namespace

cudaStream_t engine_stream() {
  // A blocking stream of its own rather than the legacy default stream: library calls that take a stream
  // (cuBLASLt, cuDNN) are then ordered with the kernels by construction.
  static cudaStream_t handle = [] {
    cudaStream_t s = nullptr;
    check(cudaStreamCreate(&s), "cudaStreamCreate");
    return s;
  }();
  return handle;
}

cudaStream_t stream() { return current_stream ? current_stream : engine_stream(); }

StreamScope::StreamScope(cudaStream_t scoped) : previous_(current_stream) { current_stream = scoped; }
StreamScope::~StreamScope() { current_stream = previous_; }

void check(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) fail("CUDA {} failed: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}

void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t run_bytes, size_t rows,
               std::string_view what) {
  if (run_bytes == 0 || rows == 0) return;
  check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, run_bytes, rows, cudaMemcpyDeviceToDevice, stream()), what);
}

void synchronize(std::string_view what) {
  check(cudaStreamSynchronize(stream()), what);
  check(cudaGetLastError(), what);
}

void* allocate(size_t nbytes) {
  void* data = nullptr;
  cudaError_t status = cudaMallocFromPoolAsync(&data, nbytes ? nbytes : 1, pool(), stream());
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    const MemoryStats stats = memory_stats();
    fail("out of GPU memory allocating {:.3f} GB ({:.3f} GB in use, {:.3f} GB reserved)", double(nbytes) / 1e9,
         double(stats.in_use) / 1e9, double(stats.reserved) / 1e9);
  }
  check(status, "cudaMallocFromPoolAsync");
  return data;
}

// Called from destructors, so it must not throw. The one expected failure is at process exit, when the
// CUDA runtime has already been torn down and the memory is gone anyway.
void release(void* data) {
  if (cudaFreeAsync(data, stream()) != cudaSuccess) cudaGetLastError();
}

MemoryStats memory_stats() {
  return {.in_use = pool_attribute(cudaMemPoolAttrUsedMemCurrent),
          .peak_in_use = pool_attribute(cudaMemPoolAttrUsedMemHigh),
          .reserved = pool_attribute(cudaMemPoolAttrReservedMemCurrent),
          .peak_reserved = pool_attribute(cudaMemPoolAttrReservedMemHigh)};
}

void reset_peak() {
  uint64_t zero = 0;
  check(cudaMemPoolSetAttribute(pool(), cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute");
  check(cudaMemPoolSetAttribute(pool(), cudaMemPoolAttrReservedMemHigh, &zero), "cudaMemPoolSetAttribute");
}

size_t device_used_bytes() {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total - free;
}

}  // namespace moetune::gpu
