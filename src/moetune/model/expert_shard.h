// A rank's share of the experts under expert parallelism: shard `index` of `count` holds experts
// [index · E / count, (index + 1) · E / count) of every MoE layer. The layout's expert parameters shrink to
// that share ([E / count, ...]) and keep only its HF pieces, so loading reads only those bytes and saving
// writes only those tensors.
#pragma once

#include <cstdint>
#include <utility>

#include "moetune/model/parameter_layout.h"

namespace moetune::model {

struct ExpertShard {
  int index = 0, count = 1;
  bool whole() const { return count == 1; }
  bool operator==(const ExpertShard&) const = default;
};

// [first, end) of E experts.
std::pair<int64_t, int64_t> expert_range(int64_t num_experts, ExpertShard shard);

// Every MoE layer's expert count (0 without MoE layers); an error if the layers disagree.
int64_t experts_per_layer(const ModelSpec& spec);

// Shrinks the ExpertSharded parameters of `layout` to `shard`'s experts (and drops their v5 fused name: a
// share of a fused tensor is saved as the per-expert tensors, which transformers loads the same way).
void shard_experts(ParameterLayout& layout, ExpertShard shard);

}  // namespace moetune::model
