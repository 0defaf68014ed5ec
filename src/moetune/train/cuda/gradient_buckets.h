// ZeRO-2's gradient reduction in buckets, overlapped with the backward pass. Each flat run of gradients (the
// replicated parameters', reduced over the world; the experts', over the ranks holding the same experts) is cut
// into buckets of about kBucketElements, each split evenly over its group: a rank's shard is its piece of every
// bucket, so a bucket's reduce-scatter can start as soon as the backward pass has finished the parameters it
// holds, on a stream of its own, while the compute stream goes on with the layers below. Buckets start in the
// order the backward pass finishes them (the LM head's first, the embedding's last), the same order on every
// rank, and only in the last micro-batch of a step (earlier ones only accumulate). After the optimizer's update
// the buckets are all-gathered back on the same stream in the order the next forward pass needs them, and the
// forward pass waits for each layer's buckets only when it reaches the layer.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/model/parameter_layout.h"
#include "moetune/parallel/communicator.h"

namespace moetune::train::cuda {

struct GradientBucket {
  std::string name;                        // "<run>.<index>": the training state's key of its shard
  Tensor parameters, gradients;            // the bucket's stretch of the run (views)
  Tensor parameter_shard, gradient_shard;  // this rank's piece of each (the reduce-scatter writes in place)
  std::shared_ptr<parallel::Communicator> group;
  int64_t ready_layer = -1;  // final once the backward pass reports this layer (model/decoder_walk.h), or below
};

// The buckets of one run: `parameters` / `gradients` are the run's flat buffers, `gradient_views` the model's
// per-parameter gradients (views into runs; those of other runs are ignored) parallel to `layout.parameters`.
std::vector<GradientBucket> make_gradient_buckets(const std::string& run_name, const Tensor& parameters,
                                                  const Tensor& gradients, std::shared_ptr<parallel::Communicator> group,
                                                  const model::ParameterLayout& layout,
                                                  const std::vector<Tensor>& gradient_views, int64_t bucket_elements);

class BucketedReduction {
 public:
  explicit BucketedReduction(std::vector<GradientBucket> buckets);
  ~BucketedReduction();
  BucketedReduction(const BucketedReduction&) = delete;
  BucketedReduction& operator=(const BucketedReduction&) = delete;

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Before each micro-batch's backward pass: only the step's last starts reductions as layers finish.
  void begin_micro_batch(bool last_of_step);
  // The backward pass has finished every parameter of layers >= `layer` (queued on the compute stream).
  void layer_done(int64_t layer);
  // Starts what has not started, and makes the compute stream wait for every reduction.
  void finish();
  // All-gathers each bucket's parameters in place, on the compute stream (after the optimizer's update).
  void gather_parameters();
  // The same, queued on the reductions' stream after what the compute stream has queued (the update); a
  // forward pass then calls layer_needed, and anything else that reads the parameters wait_for_parameters.
  void start_gathering_parameters();
  // The forward pass is about to use the parameters of `layer` (-1: the embedding; num_layers: the head).
  void layer_needed(int64_t layer);
  void wait_for_parameters();

 private:
  void start(GradientBucket& bucket);
  // Starts, in order, the buckets that the backward pass has finished down to `layer`.
  void start_ready(int64_t layer);

  std::vector<GradientBucket> buckets_;  // in start order
  std::vector<size_t> gather_order_;      // buckets in the order the forward pass needs them
  std::vector<cudaEvent_t> gathered_;     // per bucket (of gather_order_): its all-gather is done
  size_t waited_ = 0;                     // the forward pass waited for gather_order_[0, waited_)
  size_t started_ = 0;
  bool overlapping_ = false;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr, reductions_done_ = nullptr;
};

}  // namespace moetune::train::cuda
