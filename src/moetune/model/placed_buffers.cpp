#include "moetune/model/placed_buffers.h"

namespace moetune::model {

PlacedBuffers allocate_by_placement(const ParameterLayout& layout, const std::vector<FlatRequest>& requests, Device device,
                                    bool zeroed, ShardCounts shards) {
  std::vector<FlatRequest> replicated = requests, experts = requests;
  for (size_t i = 0; i < requests.size(); ++i) {
    const bool sharded = layout.parameters[i].placement == Placement::ExpertSharded;
    (sharded ? replicated : experts)[i].wanted = false;
  }
  PlacedBuffers placed{allocate_flat(replicated, device, zeroed, shards.replicated),
                       allocate_flat(experts, device, zeroed, shards.experts), {}};
  for (size_t i = 0; i < requests.size(); ++i)
    placed.views.push_back(placed.replicated.views[i].defined() ? placed.replicated.views[i] : placed.experts.views[i]);
  return placed;
}

}  // namespace moetune::model
