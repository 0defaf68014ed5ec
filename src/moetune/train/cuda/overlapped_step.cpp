#include "moetune/train/cuda/overlapped_step.h"

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/phase_profile.h"
#include "moetune/ops/cuda/grad_norm.h"

namespace moetune::train::cuda {
namespace {

cudaEvent_t make_event() {
  cudaEvent_t event = nullptr;
  gpu::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "an event");
  return event;
}

// `stream` runs after what the compute stream has queued so far.
void follow_compute(cudaStream_t stream, cudaEvent_t event) {
  gpu::check(cudaEventRecord(event, gpu::stream()), "recording the compute stream's progress");
  gpu::check(cudaStreamWaitEvent(stream, event), "ordering work after it");
}

void compute_waits(cudaEvent_t event) { gpu::check(cudaStreamWaitEvent(gpu::stream(), event), "waiting for another stream"); }

}  // namespace

OverlappedStep::OverlappedStep(const std::vector<ops::cuda::AdamWSlot>& slots, const std::vector<std::string>& names,
                               int64_t num_layers) {
  for (auto& [layer, layer_slots] : group_by_ready_layer(slots, names, num_layers))
    groups_[layer].layer_slots = std::move(layer_slots);
  norms_squared_ = Tensor::zeros({int64_t(groups_.size())}, DType::F32, Device::cuda());
  int64_t g = 0;
  for (auto& [layer, group] : groups_) {
    group.norm_squared = norms_squared_.flat_slice(g++, {1});
    group.updated = make_event();
  }
  int lowest = 0, highest = 0;
  gpu::check(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "stream priorities");
  // The sums of squares fill the gaps of the backward pass; the updates are what the next forward pass waits for.
  gpu::check(cudaStreamCreateWithPriority(&norm_stream_, cudaStreamNonBlocking, lowest), "the gradient norm stream");
  gpu::check(cudaStreamCreateWithPriority(&update_stream_, cudaStreamNonBlocking, highest), "the update stream");
  compute_done_ = make_event();
  summed_ = make_event();
  zeroed_ = make_event();
}

OverlappedStep::~OverlappedStep() {
  for (cudaStream_t stream : {norm_stream_, update_stream_})
    if (stream) cudaStreamSynchronize(stream);
  for (auto& [layer, group] : groups_)
    if (group.updated) cudaEventDestroy(group.updated);
  for (cudaEvent_t event : {compute_done_, summed_, zeroed_})
    if (event) cudaEventDestroy(event);
  for (cudaStream_t stream : {norm_stream_, update_stream_})
    if (stream) cudaStreamDestroy(stream);
}

void OverlappedStep::layer_done(int64_t layer) {
  const auto found = groups_.find(layer);
  if (found == groups_.end() || found->second.summed) return;
  Group& group = found->second;
  follow_compute(norm_stream_, compute_done_);
  const gpu::StreamScope on(norm_stream_);
  const PhaseScope phase("optimizer.norm (own stream)");
  ops::cuda::grad_norm_squared(group.layer_slots.grads, group.norm_squared);
  group.summed = true;
}

void OverlappedStep::norm_squared(const Tensor& norm_squared) {
  for (auto& [layer, group] : groups_)
    if (!group.summed) ops::cuda::grad_norm_squared(group.layer_slots.grads, group.norm_squared);
  gpu::check(cudaEventRecord(summed_, norm_stream_), "recording the sums of squares");
  compute_waits(summed_);
  ops::cuda::sum_floats(norms_squared_, norm_squared);
  for (auto& [layer, group] : groups_) group.summed = false;
}

void OverlappedStep::step(const ops::cuda::AdamWHyper& hyper, ops::cuda::OptimizerPrecision precision,
                          const Tensor& grad_scale, uint64_t seed, bool int8_state, const std::function<void()>& zero) {
  follow_compute(update_stream_, compute_done_);
  const gpu::StreamScope on(update_stream_);
  // std::map's order is the forward pass's: -1 (the embedding), the layers, then num_layers.
  for (auto& [layer, group] : groups_) {
    const PhaseScope phase("optimizer.adamw (own stream)");
    ops::cuda::adamw_step(group.layer_slots.slots, hyper, precision, grad_scale, layer_seed(seed, layer), int8_state);
    gpu::check(cudaEventRecord(group.updated, update_stream_), "recording a layer's update");
  }
  const PhaseScope phase("optimizer.zero_grad (own stream)");
  zero();
  gpu::check(cudaEventRecord(zeroed_, update_stream_), "recording the zeroing");
}

void OverlappedStep::parameters_needed(int64_t layer) {
  const auto found = groups_.find(layer);
  if (found != groups_.end()) compute_waits(found->second.updated);  // never recorded (step 1): no wait
}

void OverlappedStep::wait_for_all() { compute_waits(zeroed_); }  // the stream's last work

}  // namespace moetune::train::cuda
