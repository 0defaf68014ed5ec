// TrainingEngine's default queued step: each call does its work at once (the CPU engine; the GPU engine
// overrides them to read its numbers back later).
#include "moetune/core/error.h"
#include "moetune/train/engine.h"

namespace moetune::train {

void TrainingEngine::queue_forward_backward(const model::Batch& batch) {
  if (!last_open_) readings_.emplace_back();
  last_open_ = true;
  StepReadings& step = readings_.back();
  model::CausalLMOutput out = forward_backward(batch);
  out.logits = Tensor();
  step.micro_batches.push_back(std::move(out));
}

void TrainingEngine::queue_optimizer_step(double lr, double max_grad_norm) {
  if (!last_open_) readings_.emplace_back();  // a step without micro-batches still steps
  last_open_ = false;
  StepReadings& step = readings_.back();
  if (!step.micro_batches.empty()) step.router = router_stats();  // the last micro-batch's, once a step
  step.grad_norm = optimizer_step(lr, max_grad_norm);
}

StepReadings TrainingEngine::finish_step() {
  MOETUNE_CHECK(!readings_.empty() && !(readings_.size() == 1 && last_open_),
                "finish_step without a queued optimizer step");
  StepReadings step = std::move(readings_.front());
  readings_.pop_front();
  return step;
}

}  // namespace moetune::train
