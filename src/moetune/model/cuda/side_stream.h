// A second CUDA stream for work that may run beside the current one (a MoE layer's shared experts beside its
// routed experts). fork() orders the side stream after everything queued so far on the current stream; work
// queued inside a Scope goes to the side stream; join() makes the current stream wait for the side's work so
// far. Memory handed between the two must outlive the other stream's use of it: a tensor allocated on one
// stream and read on the other is released only after join().
#pragma once

#include <cuda_runtime_api.h>

#include "moetune/core/cuda_runtime.h"

namespace moetune::model::cuda {

class SideStream {
 public:
  // `high_priority`: the side stream's blocks are scheduled before those of the engine's stream (CUDA's default,
  // lowest priority) when both wait for an SM; otherwise the two share the SMs in the order work was queued.
  explicit SideStream(bool high_priority);
  ~SideStream();
  // The engine's one side stream (made on first use, at the default priority): one stream and one GEMM
  // workspace however many layers use it.
  static SideStream& engine();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  void fork();
  void join();
  // The side stream is the current stream while this lives.
  gpu::StreamScope scope() const { return gpu::StreamScope(stream_); }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t forked_ = nullptr, done_ = nullptr;
};

}  // namespace moetune::model::cuda
