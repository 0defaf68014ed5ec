// A parameter set (or its gradients) in flat runs by placement: the replicated parameters in one run per
// dtype, the expert-sharded ones in another. ZeRO shards each run over its own group of ranks (the world for
// the replicated run, the expert's replicas for the other), so each run is padded to split evenly there;
// parameters and gradients made from the same requests have the same offsets, so a shard of one is the
// same elements as the shard of the other.
#pragma once

#include <vector>

#include "moetune/core/flat_buffers.h"
#include "moetune/model/parameter_layout.h"

namespace moetune::model {

struct ShardCounts {
  int64_t replicated = 1;  // ranks the replicated run is split over
  int64_t experts = 1;     // ranks the expert run is split over
};

struct PlacedBuffers {
  FlatBuffers replicated, experts;
  std::vector<Tensor> views;  // parallel to the requests (undefined where not wanted)
};

// `requests` parallel to layout.parameters.
PlacedBuffers allocate_by_placement(const ParameterLayout& layout, const std::vector<FlatRequest>& requests, Device device,
                                    bool zeroed, ShardCounts shards);

}  // namespace moetune::model
