// AdamW applied during the backward pass (optimizer.update_in_backward): as soon as the decoder walk reports a
// layer's gradients final (model/decoder_walk.h's LayerGradientsDone), that layer's parameters take their AdamW
// step and its gradients are dropped, so that all the decoder layers' gradients share one buffer the size of the
// largest layer's (model::GradientStorage::LayerArena) instead of the whole model's. Exactly the update the step
// at the end would make, as long as no later micro-batch adds to the gradients (gradient accumulation) and no
// norm over all of them scales them first (clipping): the engine uses it only then. The norm is still summed,
// layer by layer, for the log, by the AdamW kernel as it reads the gradients (no pass of its own).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moetune/model/parameter_store.h"
#include "moetune/ops/cuda/adamw.h"

namespace moetune::train::cuda {

class UpdateInBackward {
 public:
  // `slots` and their parameters' engine names (`names`, parallel): the trainable parameters only.
  UpdateInBackward(model::ParameterStore& store, std::vector<ops::cuda::AdamWSlot> slots, const std::vector<std::string>& names,
                   ops::cuda::OptimizerPrecision precision, uint64_t seed, bool int8_state);

  // Before the step's forward pass: its learning rate and (1-based) step number.
  void begin_step(const ops::cuda::AdamWHyper& hyper);
  // The walk's hook: num_layers (final norm, untied LM head), each layer L, then -1 (the embedding).
  void layer_done(int64_t layer);
  // After the backward pass: the gradients' whole norm (waits for the GPU).
  double gradient_norm() const;

 private:
  struct Group {
    int64_t layer;
    std::vector<ops::cuda::AdamWSlot> slots;
    Tensor norm_squared;  // a view of norms_squared_
  };
  model::ParameterStore& store_;
  int64_t num_layers_;
  ops::cuda::OptimizerPrecision precision_;
  uint64_t seed_;
  bool int8_state_;
  ops::cuda::AdamWHyper hyper_{};
  std::map<int64_t, Group> groups_;
  Tensor norms_squared_;  // F32 [groups] on the GPU
};

}  // namespace moetune::train::cuda
