// The GPU engine's queued steps (TrainingEngine::queue_forward_backward / queue_optimizer_step / finish_step):
// each step's losses, router counts and gradient norm stay on the GPU until the trainer asks, then come back in
// one pinned copy, so the host can queue the next step first. At most a few steps are in flight.
#pragma once

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "moetune/core/queued_copies.h"
#include "moetune/model/cuda/causal_lm.h"
#include "moetune/train/engine.h"

namespace moetune::train::cuda {

class QueuedReadings {
 public:
  // A micro-batch's losses (opens a step if none is open).
  void add_micro_batch(model::cuda::CausalLM::QueuedLosses losses);
  // Closes the open step (or an empty one): queues the copies of its losses, of `router_counts` (each MoE
  // layer's F32 counts, as they are now on the stream) and of `norm_squared` (F32 [1], the gradient norm's
  // square) — or, when norm_squared is undefined, records `known_norm`.
  void close_step(const std::vector<std::pair<int64_t, Tensor>>& router_counts, const Tensor& norm_squared,
                  double known_norm = NAN);
  // The oldest closed step's numbers; waits for their copies alone.
  StepReadings take();
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    std::vector<model::cuda::CausalLM::QueuedLosses> losses;
    std::vector<std::pair<int64_t, int64_t>> router;  // layer, experts
    std::unique_ptr<gpu::HostReadback> readback;
    bool norm_read_back = false;
    double known_norm = NAN;
  };
  std::deque<Step> steps_;
  bool open_ = false;
  std::vector<std::unique_ptr<gpu::HostReadback>> spare_;  // taken steps' pinned buffers, for reuse
};

}  // namespace moetune::train::cuda
