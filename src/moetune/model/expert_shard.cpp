#include "moetune/model/expert_shard.h"

#include "moetune/core/error.h"

namespace moetune::model {

std::pair<int64_t, int64_t> expert_range(int64_t num_experts, ExpertShard shard) {
  const int64_t per = num_experts / shard.count;
  return {shard.index * per, (shard.index + 1) * per};
}

int64_t experts_per_layer(const ModelSpec& spec) {
  int64_t experts = 0;
  for (const LayerSpec& layer : spec.layers)
    for (const SublayerSpec& sublayer : layer.sublayers)
      if (const MoeSpec* moe = sublayer.moe()) {
        if (experts != 0 && moe->router.num_experts != experts)
          fail("MoE layers with {} and {} experts: expert parallelism needs one expert count", experts, moe->router.num_experts);
        experts = moe->router.num_experts;
      }
  return experts;
}

void shard_experts(ParameterLayout& layout, ExpertShard shard) {
  if (shard.whole()) return;
  for (ParameterSpec& p : layout.parameters) {
    if (p.placement != Placement::ExpertSharded) continue;
    const int64_t experts = p.shape.at(0);
    MOETUNE_CHECK(experts % shard.count == 0 && p.pieces.size() % size_t(experts) == 0,
                  "'{}': {} experts in {} pieces do not split into {} shares", p.name, experts, p.pieces.size(), shard.count);
    const auto [first, end] = expert_range(experts, shard);
    const size_t pieces_per_expert = p.pieces.size() / size_t(experts);
    p.pieces = std::vector<HfTensor>(p.pieces.begin() + first * int64_t(pieces_per_expert),
                                     p.pieces.begin() + end * int64_t(pieces_per_expert));
    p.shape[0] = end - first;
    p.fused_hf_name.clear();
  }
}

}  // namespace moetune::model
