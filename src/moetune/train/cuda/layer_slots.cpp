#include "moetune/train/cuda/layer_slots.h"

#include "moetune/core/error.h"
#include "moetune/model/gradient_ready_layer.h"

namespace moetune::train::cuda {

std::map<int64_t, LayerSlots> group_by_ready_layer(const std::vector<ops::cuda::AdamWSlot>& slots,
                                                   const std::vector<std::string>& names, int64_t num_layers) {
  MOETUNE_CHECK(names.size() == slots.size(), "{} slots but {} names", slots.size(), names.size());
  std::map<int64_t, LayerSlots> groups;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i].grad.defined()) continue;
    LayerSlots& group = groups[model::gradient_ready_layer(names[i], num_layers)];
    group.grads.push_back(slots[i].grad);
    group.slots.push_back(slots[i]);
  }
  return groups;
}

uint64_t layer_seed(uint64_t seed, int64_t layer) { return seed ^ (uint64_t(layer + 2) * 0x9E3779B97F4A7C15ull); }

}  // namespace moetune::train::cuda
