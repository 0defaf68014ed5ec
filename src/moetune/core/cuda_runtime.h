// The engine's CUDA streams and its memory accounting. Every kernel, library call, copy and allocation of the
// GPU path runs in order on the *current* stream, stream(): the engine's own stream unless a StreamScope names
// another (communication will run on a stream of its own this way, ordered with compute by events). Within
// one stream no other synchronisation is needed between ops; the host waits only where it reads results back. Device memory comes from CUDA's stream-ordered caching allocator
// (cudaMallocAsync on the device's default pool, which keeps freed blocks for reuse), whose high-water mark
// is the engine's reported peak. Only built with CUDA; host code includes it behind MOETUNE_HAVE_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string_view>

namespace moetune::gpu {

// The current stream of this thread: the innermost StreamScope's, else engine_stream().
cudaStream_t stream();
// The engine's own stream (a blocking stream, not the legacy default stream).
cudaStream_t engine_stream();

// Makes `stream` the current stream of this thread until the scope ends (scopes nest). Memory allocated inside
// is ordered on that stream: hand it to another stream only after an event or a synchronisation.
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t previous_;
};
// Fails with an Error naming `what` and CUDA's message.
void check(cudaError_t status, std::string_view what);
// Zeroes nbytes at data on `stream`, as cudaMemsetAsync does: up to 1 MiB with a kernel, which costs the timeline
// ~1 µs where a memset costs ~3 (core/zero_fill.cu), larger by the memset.
cudaError_t zero_async(void* data, size_t nbytes, cudaStream_t stream);
// Copies `rows` runs of `run_bytes` from src (runs `src_pitch` bytes apart) to dst (`dst_pitch` apart), device to
// device on stream(): a block of one matrix's columns into another's. Fails naming `what`.
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t run_bytes, size_t rows,
               std::string_view what);
// Waits for all work on stream() and reports any error an asynchronous kernel raised.
void synchronize(std::string_view what = "GPU work");

void* allocate(size_t nbytes);
void release(void* data);  // never throws (destructors call it)

struct MemoryStats {
  size_t in_use = 0;         // bytes held by live allocations (rounded as the pool rounds them)
  size_t peak_in_use = 0;    // high-water mark of in_use since the last reset_peak()
  size_t reserved = 0;       // bytes the pool holds from the driver, cached blocks included
  size_t peak_reserved = 0;
};
MemoryStats memory_stats();
void reset_peak();
// What the whole device has in use (every process, the CUDA context included): total minus free.
size_t device_used_bytes();

}  // namespace moetune::gpu
