// The optimizer step's memory-bound parts beside the compute-bound passes (one GPU, the step after the backward
// pass, clipping or not). The clipping norm's sum of squares, AdamW and the zeroing of the gradients only move
// memory (on Moonlight's 4-layer cut 5 GB, 35 GB and 5 GB: ~13 ms at the H200's bandwidth), and they ran on the
// compute stream between the backward pass and the next forward pass, with the GEMMs idle. Here:
// - a layer's sum of squares is queued on a low-priority stream of its own as soon as the decoder walk reports
//   its gradients final (model/decoder_walk.h's LayerGradientsDone) on the step's last micro-batch, beside the
//   backward pass of the layers below; the norm is the sum of the layers' sums in a fixed order (deterministic,
//   and the one pass's value up to fp32 rounding);
// - AdamW runs layer by layer on a high-priority stream in the order the next forward pass needs the layers
//   (embedding, layers 0, 1, ..., final norm and LM head), and that forward pass waits for each layer's update
//   only where it starts using the layer (CausalLM::on_parameters_needed), so the LM head's update, say, runs
//   beside the whole decoder;
// - the zeroing follows the updates on that stream, and the next backward pass waits for it before it writes its
//   first gradient (CausalLM::on_backward_start).
// Each group is updated in a call of its own, with layer_seed's seed: bit for bit the update during the backward
// pass makes (update_in_backward.h); the same as one call over all slots except for stochastic rounding's bits.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "moetune/train/cuda/layer_slots.h"

namespace moetune::train::cuda {

class OverlappedStep {
 public:
  // `slots` (on the GPU) and their parameters' engine names (parallel lists); `num_layers` the decoder's.
  OverlappedStep(const std::vector<ops::cuda::AdamWSlot>& slots, const std::vector<std::string>& names, int64_t num_layers);
  ~OverlappedStep();
  OverlappedStep(const OverlappedStep&) = delete;
  OverlappedStep& operator=(const OverlappedStep&) = delete;

  // The walk's hook on the step's last micro-batch: num_layers, each layer L, then -1 (the embedding).
  void layer_done(int64_t layer);
  // The whole sum of squares into norm_squared (F32 [1] on the GPU), queued on the compute stream after every
  // layer's; layers not reported done are summed now.
  void norm_squared(const Tensor& norm_squared);
  // Queues AdamW for every group after what the compute stream has queued (the clip coefficient, grad_scale),
  // then `zero` (the gradients' zeroing); returns at once.
  void step(const ops::cuda::AdamWHyper& hyper, ops::cuda::OptimizerPrecision precision, const Tensor& grad_scale,
            uint64_t seed, bool int8_state, const std::function<void()>& zero);
  // The compute stream waits for layer's update (the forward pass's hook).
  void parameters_needed(int64_t layer);
  // The compute stream waits for all of the step: before the backward pass writes its first gradient, and
  // before the parameters or the optimizer state are read or written otherwise (saving, restoring).
  void wait_for_all();

 private:
  struct Group {
    LayerSlots layer_slots;
    Tensor norm_squared;            // a view of norms_squared_
    bool summed = false;            // this step's sum of squares queued
    cudaEvent_t updated = nullptr;  // recorded after its update
  };
  std::map<int64_t, Group> groups_;  // by the layer whose backward pass finishes them
  Tensor norms_squared_;             // F32 [groups]
  cudaStream_t norm_stream_ = nullptr, update_stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr, summed_ = nullptr, zeroed_ = nullptr;
};

}  // namespace moetune::train::cuda
