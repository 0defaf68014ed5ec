#include "moetune/train/cuda/overlapped_grad_norm.h"

#include <algorithm>
#include <optional>

#include "moetune/core/cuda_runtime.h"
#include "moetune/core/error.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/gradient_ready_layer.h"

namespace moetune::train::cuda {

OverlappedGradNorm::OverlappedGradNorm(const std::vector<Tensor>& gradients, const std::vector<std::string>& names,
                                       int64_t num_layers) {
  MOETUNE_CHECK(names.size() == gradients.size(), "{} gradients but {} names", gradients.size(), names.size());
  // Slots in list order, as grad_norm_squared lays them out: the same final sum.
  int64_t slots = 0;
  for (size_t i = 0; i < gradients.size(); ++i) {
    const int64_t layer = model::gradient_ready_layer(names[i], num_layers);
    auto found = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.layer == layer; });
    if (found == groups_.end()) found = groups_.insert(groups_.end(), Group{.layer = layer});
    found->gradients.push_back(gradients[i]);
    found->first_slots.push_back(slots);
    found->indices.push_back(i);
    slots += ops::cuda::grad_norm_slots(gradients[i]);
  }
  std::sort(groups_.begin(), groups_.end(), [](const Group& a, const Group& b) { return a.layer > b.layer; });
  partials_ = Tensor::empty({slots}, DType::F32, Device::cuda());
  // The lowest priority there is, which is also the compute stream's (the default): where both have blocks
  // waiting, the norm's do not go first.
  int least = 0, greatest = 0;
  gpu::check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priorities");
  gpu::check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, least), "the gradient norm's stream");
  gpu::check(cudaEventCreateWithFlags(&layer_done_, cudaEventDisableTiming), "an event");
  gpu::check(cudaEventCreateWithFlags(&partials_done_, cudaEventDisableTiming), "an event");
}

OverlappedGradNorm::~OverlappedGradNorm() {
  if (stream_) cudaStreamSynchronize(stream_);  // before partials_ goes back to the pool
  if (layer_done_) cudaEventDestroy(layer_done_);
  if (partials_done_) cudaEventDestroy(partials_done_);
  if (stream_) cudaStreamDestroy(stream_);
}

void OverlappedGradNorm::read_at_finish(size_t index) {
  for (Group& group : groups_)
    if (std::find(group.indices.begin(), group.indices.end(), index) != group.indices.end()) group.at_finish = true;
}

void OverlappedGradNorm::begin_micro_batch(bool last_of_step) {
  join();  // this backward pass writes the gradients the norm stream may still read
  for (Group& group : groups_) group.started = false;
  armed_ = last_of_step;
}

void OverlappedGradNorm::layer_done(int64_t layer) {
  if (!armed_) return;
  for (Group& group : groups_)
    if (group.layer == layer && !group.started && !group.at_finish) start(group);
}

void OverlappedGradNorm::start(Group& group) {
  // What the compute stream has queued so far (this layer's gradients) comes before the partials.
  gpu::check(cudaEventRecord(layer_done_, gpu::stream()), "recording the backward pass's progress");
  gpu::check(cudaStreamWaitEvent(stream_, layer_done_), "ordering the gradient norm after the backward pass");
  const gpu::StreamScope on(stream_);
  const PhaseScope phase("grad_norm.partials (own stream)");
  ops::cuda::grad_norm_partials(group.gradients, group.first_slots, partials_);
  group.started = true;
  pending_ = true;
}

void OverlappedGradNorm::join() {
  if (!pending_) return;
  gpu::check(cudaEventRecord(partials_done_, stream_), "recording the gradient norm's partials");
  gpu::check(cudaStreamWaitEvent(gpu::stream(), partials_done_), "waiting for the gradient norm's partials");
  pending_ = false;
}

void OverlappedGradNorm::finish(const Tensor& norm_squared, const ops::cuda::MarkedRows* sparse) {
  // What the backward pass did not start (all of it, unless this step's last micro-batch started some), in one
  // launch on the compute stream, queued before the wait so that it runs while the norm stream finishes.
  std::vector<Tensor> gradients;
  std::vector<int64_t> first_slots;
  std::optional<ops::cuda::MarkedRows> sparse_here;  // `sparse` in this list (a started one was read whole: same bits)
  for (const Group& group : groups_)
    if (!group.started)
      for (size_t k = 0; k < group.gradients.size(); ++k) {
        if (sparse && group.indices[k] == sparse->index) sparse_here = ops::cuda::MarkedRows{gradients.size(), sparse->marked};
        gradients.push_back(group.gradients[k]);
        first_slots.push_back(group.first_slots[k]);
      }
  if (!gradients.empty())
    ops::cuda::grad_norm_partials(gradients, first_slots, partials_, sparse_here ? &*sparse_here : nullptr);
  join();
  ops::cuda::grad_norm_sum_partials(partials_, norm_squared);
  for (Group& group : groups_) group.started = false;
  armed_ = false;
}

}  // namespace moetune::train::cuda
