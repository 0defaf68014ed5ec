// ZeRO-2 AdamW over flat runs of parameters and gradients (model/placed_buffers.h): each run's gradients are
// reduce-scattered (summed) over its group, so each rank holds the full gradient of one shard only; the
// gradient norm is summed over the world's shards; AdamW (train/adamw.h, the same arithmetic as one rank)
// updates this rank's shard with moments for that shard alone; the updated shards are all-gathered into every
// rank's parameters. The dense run's group is the world, an expert run's the ranks that hold those experts.
#pragma once

#include <memory>
#include <vector>

#include "moetune/io/safetensors.h"
#include "moetune/parallel/communicator.h"
#include "moetune/train/adamw.h"

namespace moetune::train {

struct ShardedRun {
  std::string name;  // names its state in checkpoints: "replicated", "experts"
  Tensor parameters, gradients;  // [N] each, N divisible by the group's size, same layout
  std::shared_ptr<parallel::Communicator> group;
};

class ShardedAdamW {
 public:
  ShardedAdamW(std::vector<ShardedRun> runs, std::shared_ptr<parallel::Communicator> world, AdamWOptions options);

  // Reduces the gradients, clips to max_grad_norm (> 0), steps at `lr` and gathers the parameters; no update
  // when the norm is NaN or infinite. Returns the norm before clipping. The caller zeroes the gradients.
  double step(double lr, double max_grad_norm);
  int64_t steps_taken() const;

  // This rank's shards: "zero.<run>.param", ".adam_m", ".adam_v" (and ".adam_m_absmax", ".adam_v_absmax" with int8
  // state); and their restore, which is not collective:
  // gather_parameters() then gives every rank the whole parameters.
  io::NamedTensors state() const;
  void restore(const io::SafetensorsFile& file, int64_t steps_taken);
  void gather_parameters();

 private:
  struct Shard {
    ShardedRun run;
    Tensor parameters, gradients;  // this rank's shard: a view of the run's parameters, and its own gradients
    std::unique_ptr<AdamW> optimizer;
  };
  void gather(Shard& shard) const;

  std::vector<Shard> shards_;
  std::shared_ptr<parallel::Communicator> world_;
};

}  // namespace moetune::train
