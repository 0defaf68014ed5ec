#include "moetune/core/queued_copies.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/error.h"

namespace moetune::gpu {
namespace {

// A pinned block and the event of the last copy out of it.
struct UploadBlock {
  void* data = nullptr;
  size_t capacity = 0;
  cudaEvent_t copied = nullptr;
};

// True once every copy queued out of the block has run (an event never recorded counts as passed).
bool block_free(const UploadBlock& block) {
  const cudaError_t status = cudaEventQuery(block.copied);
  if (status == cudaErrorNotReady) return false;
  check(status, "cudaEventQuery (upload block)");
  return true;
}

}  // namespace

void queue_upload(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  // A few blocks serve: a step uploads ~5 arrays and the host runs at most a step ahead. They live as long as
  // the process (freeing pinned memory after the CUDA runtime's teardown would fail).
  static std::mutex mutex;
  static auto* blocks = new std::vector<UploadBlock>();
  const std::lock_guard<std::mutex> lock(mutex);
  UploadBlock* block = nullptr;
  for (UploadBlock& candidate : *blocks)
    if (candidate.capacity >= nbytes && block_free(candidate)) {
      block = &candidate;
      break;
    }
  if (!block) {
    UploadBlock fresh;
    fresh.capacity = std::max(nbytes, size_t(1) << 20);
    check(cudaMallocHost(&fresh.data, fresh.capacity), "cudaMallocHost (upload block)");
    check(cudaEventCreateWithFlags(&fresh.copied, cudaEventDisableTiming), "cudaEventCreate (upload block)");
    blocks->push_back(fresh);
    block = &blocks->back();
  }
  std::memcpy(block->data, src, nbytes);
  check(cudaMemcpyAsync(dst, block->data, nbytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync (queued upload)");
  check(cudaEventRecord(block->copied, stream()), "cudaEventRecord (upload block)");
}

Tensor queue_upload(const Tensor& host) {
  MOETUNE_CHECK(host.device().is_cpu(), "queue_upload of {}: not a host tensor", host.str());
  Tensor device = Tensor::empty(host.shape(), host.dtype(), Device::cuda());
  queue_upload(device.raw_data(), host.raw_data(), host.nbytes());
  return device;
}

struct HostReadback::Pinned {
  float* data = nullptr;
  size_t capacity = 0;  // floats
  ~Pinned() {
    if (data) cudaFreeHost(data);
  }
};

HostReadback::HostReadback() : pinned_(std::make_unique<Pinned>()) {
  check(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming), "cudaEventCreate (readback)");
}

HostReadback::~HostReadback() {
  if (copied_) cudaEventDestroy(copied_);
}

void HostReadback::queue(const std::vector<Tensor>& tensors) {
  size_t total = 0;
  for (const Tensor& t : tensors) {
    MOETUNE_CHECK(t.dtype() == DType::F32 && t.device().is_cuda(), "HostReadback: {} is not F32 on the GPU", t.str());
    total += size_t(t.numel());
  }
  if (total > pinned_->capacity) {
    check(cudaEventSynchronize(copied_), "cudaEventSynchronize (readback)");  // copies still landing in the old one
    pinned_ = std::make_unique<Pinned>();
    check(cudaMallocHost(reinterpret_cast<void**>(&pinned_->data), total * sizeof(float)), "cudaMallocHost (readback)");
    pinned_->capacity = total;
  }
  size_t at = 0;
  for (const Tensor& t : tensors) {
    check(cudaMemcpyAsync(pinned_->data + at, t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost, stream()),
          "cudaMemcpyAsync (readback)");
    at += size_t(t.numel());
  }
  check(cudaEventRecord(copied_, stream()), "cudaEventRecord (readback)");
}

const float* HostReadback::values() {
  check(cudaEventSynchronize(copied_), "cudaEventSynchronize (readback)");
  check(cudaGetLastError(), "the GPU work before a readback");
  return pinned_->data;
}

}  // namespace moetune::gpu
