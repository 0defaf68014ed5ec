// AdamW with decoupled weight decay and bias correction, as torch.optim.AdamW computes it, in fp32 on the CPU.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::train {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  // `parameters` and `gradients` are parallel lists; the tensors are updated in place by step(). A parameter
  // whose gradient is undefined is frozen: it gets no moments and step() leaves it alone.
  AdamW(std::vector<Tensor> parameters, std::vector<Tensor> gradients, AdamWOptions options);

  // One update at learning rate `lr` (the schedule's value for this step).
  void step(double lr);
  void step() { step(options_.lr); }
  int64_t steps_taken() const { return steps_; }
  const AdamWOptions& options() const { return options_; }
  // The moments, parallel to the parameters (for checkpoints and tests); undefined for frozen ones.
  const std::vector<Tensor>& first_moments() const { return m_; }
  const std::vector<Tensor>& second_moments() const { return v_; }
  // Restores a saved state (moments copied in, parallel to the parameters) to resume exactly.
  void restore(const std::vector<Tensor>& first_moments, const std::vector<Tensor>& second_moments, int64_t steps_taken);

 private:
  std::vector<Tensor> parameters_, gradients_, m_, v_;
  AdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace moetune::train
