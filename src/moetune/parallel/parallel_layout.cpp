#include "moetune/parallel/parallel_layout.h"

#include <fmt/format.h>

#include "moetune/core/error.h"

namespace moetune::parallel {

std::string ParallelLayout::str() const {
  return fmt::format("{} rank{}, expert parallel {}", world, world == 1 ? "" : "s", expert);
}

ParallelLayout make_layout(int world, int rank, int expert, int64_t num_experts) {
  if (expert < 1) fail("parallel.expert is {}; it must be at least 1", expert);
  if (world % expert != 0)
    fail("parallel.expert {} does not divide the world size {} (the ranks form groups of parallel.expert)", expert, world);
  if (expert > 1 && num_experts == 0) fail("parallel.expert is {} but the model has no MoE layer", expert);
  if (num_experts > 0 && num_experts % expert != 0)
    fail("parallel.expert {} does not divide the model's {} experts (each rank must hold as many)", expert, num_experts);
  return {world, rank, expert};
}

ParallelGroups make_groups(std::shared_ptr<Communicator> world, int expert, int64_t num_experts) {
  ParallelGroups groups;
  groups.layout = make_layout(world->size(), world->rank(), expert, num_experts);
  groups.expert_parallel = world->split(groups.layout.expert_group());
  groups.expert_replicas = world->split(groups.layout.expert_rank());
  groups.world = std::move(world);
  return groups;
}

}  // namespace moetune::parallel
