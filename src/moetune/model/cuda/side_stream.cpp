#include "moetune/model/cuda/side_stream.h"

namespace moetune::model::cuda {

SideStream::SideStream(bool high_priority) {
  int lowest = 0, highest = 0;  // CUDA's numbers: lower is more urgent; the default is the lowest
  gpu::check(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "cudaDeviceGetStreamPriorityRange");
  gpu::check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, high_priority ? highest : lowest),
             "creating a side stream");
  gpu::check(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming), "an event");
  gpu::check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "an event");
}

SideStream& SideStream::engine() {
  static SideStream side(/*high_priority=*/false);
  return side;
}

SideStream::~SideStream() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (forked_) cudaEventDestroy(forked_);
  if (done_) cudaEventDestroy(done_);
  if (stream_) cudaStreamDestroy(stream_);
}

void SideStream::fork() {
  gpu::check(cudaEventRecord(forked_, gpu::stream()), "recording the fork to a side stream");
  gpu::check(cudaStreamWaitEvent(stream_, forked_), "ordering the side stream after it");
}

void SideStream::join() {
  gpu::check(cudaEventRecord(done_, stream_), "recording the side stream's work");
  gpu::check(cudaStreamWaitEvent(gpu::stream(), done_), "waiting for the side stream");
}

}  // namespace moetune::model::cuda
