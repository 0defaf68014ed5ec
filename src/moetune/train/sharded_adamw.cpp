#include "moetune/train/sharded_adamw.h"

#include <cmath>

#include "moetune/core/error.h"
#include "moetune/train/grad_clip.h"

namespace moetune::train {

ShardedAdamW::ShardedAdamW(std::vector<ShardedRun> runs, std::shared_ptr<parallel::Communicator> world, AdamWOptions options)
    : world_(std::move(world)) {
  for (ShardedRun& run : runs) {
    const int64_t ranks = run.group->size();
    MOETUNE_CHECK(run.parameters.numel() == run.gradients.numel() && run.parameters.numel() % ranks == 0 &&
                      run.parameters.dtype() == DType::F32 && run.gradients.dtype() == DType::F32,
                  "ZeRO run '{}': parameters {} and gradients {} over {} ranks", run.name, run.parameters.str(),
                  run.gradients.str(), ranks);
    const int64_t length = run.parameters.numel() / ranks;
    Shard shard;
    shard.parameters = run.parameters.flat_slice(run.group->rank() * length, {length});
    shard.gradients = Tensor::zeros({length}, DType::F32);
    shard.optimizer = std::make_unique<AdamW>(std::vector<Tensor>{shard.parameters}, std::vector<Tensor>{shard.gradients}, options);
    shard.run = std::move(run);
    shards_.push_back(std::move(shard));
  }
}

double ShardedAdamW::step(double lr, double max_grad_norm) {
  std::vector<Tensor> gradients;
  for (Shard& shard : shards_) {
    shard.run.group->reduce_scatter_sum(shard.run.gradients, shard.gradients);
    gradients.push_back(shard.gradients);
  }
  // Every element of every gradient is in exactly one rank's shard (experts: one shard over the ranks that
  // hold them, and each expert on one such group), so the world's sum is the whole model's.
  const double norm = std::sqrt(world_->all_reduce_sum(std::vector<double>{gradient_sum_of_squares(gradients)})[0]);
  if (!std::isfinite(norm)) return norm;  // a NaN/Inf gradient would spoil every weight and moment it touches
  if (max_grad_norm > 0) scale_to_max_norm(gradients, norm, max_grad_norm);
  for (Shard& shard : shards_) {
    shard.optimizer->step(lr);
    gather(shard);
  }
  return norm;
}

void ShardedAdamW::gather(Shard& shard) const {
  Tensor mine = Tensor::empty(shard.parameters.shape(), DType::F32);  // the input may not alias the output
  mine.copy_from(shard.parameters);
  shard.run.group->all_gather(mine, shard.run.parameters);
}

int64_t ShardedAdamW::steps_taken() const { return shards_.empty() ? 0 : shards_[0].optimizer->steps_taken(); }

io::NamedTensors ShardedAdamW::state() const {
  io::NamedTensors state;
  for (const Shard& shard : shards_) {
    const std::string prefix = "zero." + shard.run.name;
    state.emplace_back(prefix + ".param", shard.parameters);
    for (const auto& [suffix, tensors] : shard.optimizer->named_state()) state.emplace_back(prefix + "." + suffix, tensors[0]);
  }
  return state;
}

void ShardedAdamW::restore(const io::SafetensorsFile& file, int64_t steps_taken) {
  for (Shard& shard : shards_) {
    const std::string prefix = "zero." + shard.run.name;
    const auto take = [&](const std::string& name, const Tensor& like) {
      if (!file.contains(name))
        fail("no tensor '{}' (a checkpoint of another model or layout, or saved with another optimizer.state?)", name);
      const Tensor tensor = file.tensor(name);
      if (tensor.shape() != like.shape() || tensor.dtype() != like.dtype())
        fail("'{}' is {}, but this rank's shard is {} (a checkpoint of another model or layout, or saved with another "
             "optimizer.state?)",
             name, tensor.str(), like.str());
      return tensor;
    };
    shard.parameters.copy_from(take(prefix + ".param", shard.parameters));
    std::vector<std::vector<Tensor>> saved;
    for (const auto& [suffix, tensors] : shard.optimizer->named_state()) saved.push_back({take(prefix + "." + suffix, tensors[0])});
    shard.optimizer->restore(saved, steps_taken);
  }
}

void ShardedAdamW::gather_parameters() {
  for (Shard& shard : shards_) gather(shard);
}

}  // namespace moetune::train
