#include "moetune/train/cuda/gradient_buckets.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/error.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/gradient_ready_layer.h"

namespace moetune::train::cuda {

std::vector<GradientBucket> make_gradient_buckets(const std::string& run_name, const Tensor& parameters,
                                                  const Tensor& gradients, std::shared_ptr<parallel::Communicator> group,
                                                  const model::ParameterLayout& layout,
                                                  const std::vector<Tensor>& gradient_views, int64_t bucket_elements) {
  const int64_t length = gradients.numel(), ranks = group->size();
  MOETUNE_CHECK(length % ranks == 0 && parameters.numel() == length, "run '{}' of {} elements over {} ranks", run_name,
                length, ranks);
  // Where each parameter's gradient sits in the run, and the layer that finishes it.
  struct Stretch {
    int64_t begin, end, ready;
  };
  std::vector<Stretch> stretches;
  const auto* base = static_cast<const char*>(gradients.raw_data());
  const size_t element = dtype_size(gradients.dtype());
  for (size_t i = 0; i < gradient_views.size(); ++i) {
    const Tensor& view = gradient_views[i];
    if (!view.defined() || view.dtype() != gradients.dtype()) continue;
    const auto* at = static_cast<const char*>(view.raw_data());
    if (at < base || at >= base + size_t(length) * element) continue;
    const int64_t begin = int64_t(size_t(at - base) / element);
    stretches.push_back({begin, begin + view.numel(), model::gradient_ready_layer(layout.parameters[i].name, layout.spec.num_layers())});
  }
  // Buckets of about bucket_elements, a multiple of the ranks so that each splits evenly.
  const int64_t step = std::max<int64_t>(ranks, bucket_elements / ranks * ranks);
  std::vector<GradientBucket> buckets;
  for (int64_t begin = 0; begin < length; begin += step) {
    const int64_t size = std::min(step, length - begin), piece = size / ranks;
    GradientBucket b;
    b.name = fmt::format("{}.{}", run_name, buckets.size());
    b.parameters = parameters.flat_slice(begin, {size});
    b.gradients = gradients.flat_slice(begin, {size});
    b.parameter_shard = parameters.flat_slice(begin + group->rank() * piece, {piece});
    b.gradient_shard = gradients.flat_slice(begin + group->rank() * piece, {piece});
    b.group = group;
    // Final when the last of its parameters is; padding alone (no parameter) is final from the start.
    b.ready_layer = layout.spec.num_layers();
    for (const Stretch& s : stretches)
      if (s.begin < begin + size && s.end > begin) b.ready_layer = std::min(b.ready_layer, s.ready);
    buckets.push_back(std::move(b));
  }
  return buckets;
}

BucketedReduction::BucketedReduction(std::vector<GradientBucket> buckets) : buckets_(std::move(buckets)) {
  // Start order: as the backward pass finishes them (higher layers first), then from the end of the run.
  std::stable_sort(buckets_.begin(), buckets_.end(),
                   [](const GradientBucket& a, const GradientBucket& b) { return a.ready_layer > b.ready_layer; });
  int low = 0, high = 0;
  gpu::check(cudaDeviceGetStreamPriorityRange(&low, &high), "stream priorities");
  // The reductions' stream goes first where both have work ready: the backward pass is not waiting on them.
  gpu::check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, high), "the gradient reduction stream");
  gpu::check(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "an event");
  gpu::check(cudaEventCreateWithFlags(&reductions_done_, cudaEventDisableTiming), "an event");
  // The forward pass needs the buckets lowest layer first; within a layer, any order (run order here).
  for (size_t i = buckets_.size(); i-- > 0;) gather_order_.push_back(i);
  std::stable_sort(gather_order_.begin(), gather_order_.end(),
                   [&](size_t a, size_t b) { return buckets_[a].ready_layer < buckets_[b].ready_layer; });
  gathered_.assign(buckets_.size(), nullptr);
  for (cudaEvent_t& event : gathered_) gpu::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "an event");
  waited_ = buckets_.size();  // nothing in flight
}

BucketedReduction::~BucketedReduction() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t event : gathered_)
    if (event) cudaEventDestroy(event);
  if (compute_done_) cudaEventDestroy(compute_done_);
  if (reductions_done_) cudaEventDestroy(reductions_done_);
  if (stream_) cudaStreamDestroy(stream_);
}

void BucketedReduction::begin_micro_batch(bool last_of_step) {
  overlapping_ = last_of_step;
  started_ = 0;
}

void BucketedReduction::start(GradientBucket& bucket) {
  if (bucket.group->size() == 1) return;
  gpu::StreamScope on(stream_);
  const PhaseScope phase("zero.reduce_scatter (own stream)");
  bucket.group->reduce_scatter_sum(bucket.gradients, bucket.gradient_shard);
}

void BucketedReduction::layer_done(int64_t layer) {
  if (overlapping_) start_ready(layer);
}

void BucketedReduction::start_ready(int64_t layer) {
  if (started_ == buckets_.size() || buckets_[started_].ready_layer < layer) return;
  // What the compute stream has queued so far (this layer's gradients) comes before the reductions.
  gpu::check(cudaEventRecord(compute_done_, gpu::stream()), "recording the backward pass's progress");
  gpu::check(cudaStreamWaitEvent(stream_, compute_done_), "ordering the reductions after the backward pass");
  while (started_ < buckets_.size() && buckets_[started_].ready_layer >= layer) start(buckets_[started_++]);
}

void BucketedReduction::finish() {
  start_ready(-1);
  overlapping_ = false;
  started_ = 0;
  gpu::check(cudaEventRecord(reductions_done_, stream_), "recording the reductions");
  gpu::check(cudaStreamWaitEvent(gpu::stream(), reductions_done_), "waiting for the reductions");
}

void BucketedReduction::gather_parameters() {
  wait_for_parameters();
  for (GradientBucket& b : buckets_)
    if (b.group->size() > 1) b.group->all_gather(b.parameter_shard, b.parameters);  // in place
}

void BucketedReduction::start_gathering_parameters() {
  wait_for_parameters();
  gpu::check(cudaEventRecord(compute_done_, gpu::stream()), "recording the optimizer's update");
  gpu::check(cudaStreamWaitEvent(stream_, compute_done_), "ordering the all-gathers after it");
  const gpu::StreamScope on(stream_);
  const PhaseScope phase("zero.all_gather (own stream)");
  for (size_t i = 0; i < gather_order_.size(); ++i) {
    GradientBucket& b = buckets_[gather_order_[i]];
    if (b.group->size() > 1) b.group->all_gather(b.parameter_shard, b.parameters);  // in place
    gpu::check(cudaEventRecord(gathered_[i], stream_), "recording an all-gather");
  }
  waited_ = 0;
}

void BucketedReduction::layer_needed(int64_t layer) {
  while (waited_ < gather_order_.size() && buckets_[gather_order_[waited_]].ready_layer <= layer) {
    gpu::check(cudaStreamWaitEvent(gpu::stream(), gathered_[waited_]), "waiting for an all-gather");
    ++waited_;
  }
}

void BucketedReduction::wait_for_parameters() { layer_needed(std::numeric_limits<int64_t>::max()); }

}  // namespace moetune::train::cuda
