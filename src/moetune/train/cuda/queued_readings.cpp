#include "moetune/train/cuda/queued_readings.h"

#include <cmath>

#include "moetune/core/error.h"

namespace moetune::train::cuda {

void QueuedReadings::add_micro_batch(model::cuda::CausalLM::QueuedLosses losses) {
  if (!open_) steps_.emplace_back();
  open_ = true;
  steps_.back().losses.push_back(std::move(losses));
}

void QueuedReadings::close_step(const std::vector<std::pair<int64_t, Tensor>>& router_counts, const Tensor& norm_squared,
                                double known_norm) {
  if (!open_) steps_.emplace_back();
  open_ = false;
  Step& step = steps_.back();
  std::vector<Tensor> reads;
  for (const auto& losses : step.losses) {
    reads.push_back(losses.loss_sum);
    if (losses.aux_loss.defined()) reads.push_back(losses.aux_loss);
  }
  for (const auto& [layer, counts] : router_counts) {
    step.router.emplace_back(layer, counts.numel());
    reads.push_back(counts);
  }
  step.norm_read_back = norm_squared.defined();
  step.known_norm = known_norm;
  if (step.norm_read_back) reads.push_back(norm_squared);
  if (spare_.empty()) spare_.push_back(std::make_unique<gpu::HostReadback>());
  step.readback = std::move(spare_.back());
  spare_.pop_back();
  step.readback->queue(reads);
}

StepReadings QueuedReadings::take() {
  MOETUNE_CHECK(!steps_.empty() && !(steps_.size() == 1 && open_), "finish_step without a queued optimizer step");
  Step step = std::move(steps_.front());
  steps_.pop_front();
  const float* value = step.readback->values();
  StepReadings readings;
  for (const auto& losses : step.losses) {
    const float loss_sum = *value++;
    const float aux = losses.aux_loss.defined() ? *value++ : NAN;
    readings.micro_batches.push_back(losses.read(loss_sum, aux));
  }
  for (const auto& [layer, experts] : step.router) {
    readings.router.emplace_back(layer, model::cuda::router_stats_of_counts(value, experts));
    value += experts;
  }
  readings.grad_norm = step.norm_read_back ? std::sqrt(double(*value)) : step.known_norm;
  spare_.push_back(std::move(step.readback));
  return readings;
}

}  // namespace moetune::train::cuda
