#include "moetune/train/parallel_save.h"

#include "moetune/model/expert_parallel_save.h"

namespace moetune::train {

void save_on_ranks(const model::ModelWeights& weights, const parallel::ParallelLayout& layout,
                   const std::filesystem::path& folder, const std::function<void()>& save_whole) {
  if (layout.expert == 1) {
    if (layout.rank == 0) save_whole();
    return;
  }
  if (layout.expert_group() != 0) return;  // the first replica's ranks hold every expert once
  model::save_expert_shard(weights, folder, /*with_dense=*/layout.rank == 0);
  if (layout.rank == 0) model::save_expert_sharded_index(weights, folder);
}

}  // namespace moetune::train
