// The trainable parameters' optimizer slots grouped by the layer whose backward pass finishes their gradients
// (model/gradient_ready_layer.h): the unit of the update during the backward pass (update_in_backward.h) and of
// the optimizer step beside the forward and backward passes (overlapped_step.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moetune/ops/cuda/adamw.h"

namespace moetune::train::cuda {

struct LayerSlots {
  std::vector<ops::cuda::AdamWSlot> slots;
  std::vector<Tensor> grads;  // the slots' gradients, for the norm
};

// By layer: -1 the embedding, L the decoder layer L, num_layers the final norm and an untied LM head. `names`
// are the slots' parameters' engine names (parallel to `slots`); slots without a gradient are left out.
std::map<int64_t, LayerSlots> group_by_ready_layer(const std::vector<ops::cuda::AdamWSlot>& slots,
                                                   const std::vector<std::string>& names, int64_t num_layers);

// Stochastic rounding hashes the slot's position in the call: each group updated in a call of its own gets its
// own seed, so that the groups' first slots do not share their random bits.
uint64_t layer_seed(uint64_t seed, int64_t layer);

}  // namespace moetune::train::cuda
