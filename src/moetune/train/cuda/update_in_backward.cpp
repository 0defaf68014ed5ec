#include "moetune/train/cuda/update_in_backward.h"

#include <cmath>

#include "moetune/core/error.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/gradient_ready_layer.h"

namespace moetune::train::cuda {

UpdateInBackward::UpdateInBackward(model::ParameterStore& store, std::vector<ops::cuda::AdamWSlot> slots,
                                   const std::vector<std::string>& names, ops::cuda::OptimizerPrecision precision, uint64_t seed, bool int8_state)
    : store_(store), num_layers_(store.weights().spec().num_layers()), precision_(precision), seed_(seed), int8_state_(int8_state) {
  MOETUNE_CHECK(names.size() == slots.size(), "{} slots but {} names", slots.size(), names.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].grad.defined()) continue;
    const int64_t layer = model::gradient_ready_layer(names[i], num_layers_);
    Group& group = groups_[layer];
    group.layer = layer;
    group.slots.push_back(std::move(slots[i]));
  }
  norms_squared_ = Tensor::zeros({int64_t(groups_.size())}, DType::F32, Device::cuda());
  int64_t g = 0;
  for (auto& [layer, group] : groups_) group.norm_squared = norms_squared_.flat_slice(g++, {1});
}

void UpdateInBackward::begin_step(const ops::cuda::AdamWHyper& hyper) { hyper_ = hyper; }

void UpdateInBackward::layer_done(int64_t layer) {
  const auto found = groups_.find(layer);
  if (found == groups_.end()) return;
  const PhaseScope phase("optimizer.in_backward");
  Group& group = found->second;
  // Stochastic rounding hashes the slot's position in the call: each group its own seed, so that the groups'
  // first slots do not share their random bits.
  const uint64_t seed = seed_ ^ (uint64_t(layer + 2) * 0x9E3779B97F4A7C15ull);
  ops::cuda::adamw_step(group.slots, hyper_, precision_, Tensor(), seed, int8_state_, group.norm_squared);
  // The next layer's backward pass accumulates into the same buffer.
  if (layer >= 0 && layer < num_layers_) store_.zero_layer_arena();
}

double UpdateInBackward::gradient_norm() const {
  const Tensor host = norms_squared_.to(Device::cpu());
  double total = 0;
  for (int64_t g = 0; g < host.numel(); ++g) total += double(host.data<float>()[g]);
  return std::sqrt(total);
}

}  // namespace moetune::train::cuda
