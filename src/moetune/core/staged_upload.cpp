#include "moetune/core/staged_upload.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "moetune/core/cuda_runtime.h"

namespace moetune {
namespace {

constexpr size_t kChunkBytes = size_t(64) << 20;
constexpr int kBuffers = 3;  // one being filled, up to two being uploaded

// Allocated on the first large upload and kept for the process's life (192 MB of pinned host memory).
struct Staging {
  void* buffers[kBuffers] = {};
  cudaEvent_t uploaded[kBuffers] = {};  // recorded after the copy out of each buffer
  std::mutex mutex;                     // one upload at a time through the buffers
  Staging() {
    for (int b = 0; b < kBuffers; ++b) {
      gpu::check(cudaHostAlloc(&buffers[b], kChunkBytes, cudaHostAllocDefault), "cudaHostAlloc (upload staging)");
      gpu::check(cudaEventCreateWithFlags(&uploaded[b], cudaEventDisableTiming), "cudaEventCreate");
    }
  }
};

Staging& staging() {
  static Staging s;
  return s;
}

// memcpy split into `threads` contiguous slices, each copied on its own thread (the caller's takes the first).
void parallel_memcpy(void* dst, const void* src, size_t nbytes, int threads) {
  const size_t slice = (nbytes + size_t(threads) - 1) / size_t(threads);
  std::vector<std::thread> workers;
  for (size_t first = slice; first < nbytes; first += slice)
    workers.emplace_back([=] {
      std::memcpy(static_cast<char*>(dst) + first, static_cast<const char*>(src) + first, std::min(slice, nbytes - first));
    });
  std::memcpy(dst, src, std::min(slice, nbytes));
  for (std::thread& worker : workers) worker.join();
}

}  // namespace

void staged_upload(void* dst, const void* src, size_t nbytes) {
  Staging& s = staging();
  const std::lock_guard<std::mutex> lock(s.mutex);
  const int threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  for (size_t offset = 0, chunk = 0; offset < nbytes; offset += kChunkBytes, ++chunk) {
    const size_t length = std::min(kChunkBytes, nbytes - offset);
    const int b = int(chunk % kBuffers);
    gpu::check(cudaEventSynchronize(s.uploaded[b]), "waiting for a staging buffer");
    parallel_memcpy(s.buffers[b], static_cast<const char*>(src) + offset, length, threads);
    gpu::check(cudaMemcpyAsync(static_cast<char*>(dst) + offset, s.buffers[b], length, cudaMemcpyHostToDevice,
                               gpu::stream()),
               "cudaMemcpyAsync (staged upload)");
    gpu::check(cudaEventRecord(s.uploaded[b], gpu::stream()), "cudaEventRecord");
  }
  gpu::synchronize("staged upload");
}

}  // namespace moetune
