// How the ranks split the model: `expert` ranks form an expert-parallel group that shares the experts
// between them (each holds experts / expert of them); the world is world / expert such groups side by side,
// each a data-parallel replica. Dense parameters live on every rank, their gradients reduce-scattered over
// the world and their optimizer state sharded over it (ZeRO-2); an expert's gradient is reduced over the
// ranks that hold it (one per group, its "expert replicas") and its optimizer state sharded over those.
// Rank r is member r % expert of group r / expert (Megatron's and torchtitan's order: a group is
// consecutive ranks, which on one node share NVLink).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "moetune/parallel/communicator.h"

namespace moetune::parallel {

struct ParallelLayout {
  int world = 1, rank = 0, expert = 1;

  int expert_rank() const { return rank % expert; }       // which share of the experts this rank holds
  int expert_group() const { return rank / expert; }      // which data-parallel replica this rank is in
  int expert_replicas() const { return world / expert; }  // how many ranks hold each expert
  std::string str() const;                                // "4 ranks, expert parallel 2"
};

// Checks `expert` against the world and the model: it must divide both the world size and every MoE layer's
// expert count (errors name the recipe key parallel.expert and the numbers).
ParallelLayout make_layout(int world, int rank, int expert, int64_t num_experts);

// The communicators the layout needs, split from the world.
struct ParallelGroups {
  ParallelLayout layout;
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> expert_parallel;  // the ranks of this rank's group (token all-to-all)
  std::shared_ptr<Communicator> expert_replicas;  // the ranks holding the same experts (their gradients)
};
ParallelGroups make_groups(std::shared_ptr<Communicator> world, int expert, int64_t num_experts);

}  // namespace moetune::parallel
