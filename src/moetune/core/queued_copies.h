// Small copies between the host and the GPU that do not make the host wait, so that it can queue the next
// training step while the GPU still runs the current one (the trainer reads a step's numbers one step late).
// Both go through pinned host memory on the current stream, gpu::stream(). CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::gpu {

// dst (GPU) <- src (host, any memory), nbytes, queued on the stream: src is copied into a pinned block before
// this returns (src may then change), and the block is reused once the copy has run. For a batch's few small
// arrays; checkpoints go through staged_upload.
void queue_upload(void* dst, const void* src, size_t nbytes);
// The host tensor's copy on the GPU, by queue_upload.
Tensor queue_upload(const Tensor& host);

// F32 values of GPU tensors read back without waiting when queued: queue() copies them into pinned memory on
// the stream and records an event; values() waits for that event alone.
class HostReadback {
 public:
  HostReadback();
  ~HostReadback();
  HostReadback(const HostReadback&) = delete;
  HostReadback& operator=(const HostReadback&) = delete;

  // Copies every tensor (F32, on the GPU), in order, after what the stream has queued so far.
  void queue(const std::vector<Tensor>& tensors);
  // Waits for the copies; the tensors' values one after another, in queue()'s order.
  const float* values();

 private:
  struct Pinned;
  std::unique_ptr<Pinned> pinned_;
  cudaEvent_t copied_ = nullptr;
};

}  // namespace moetune::gpu
