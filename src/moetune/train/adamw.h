// AdamW with decoupled weight decay and bias correction, as torch.optim.AdamW computes it, in fp32 on the CPU;
// its moments in fp32, or in 8 bits as bitsandbytes' blockwise 8-bit AdamW keeps them (optimizer.state: int8).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::train {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  // Both moments as 8-bit codes (U8, the parameter's shape) with one F32 absmax per block of 256 elements of each
  // parameter (ops/adamw_math.h): dequantized, updated in fp32 with the parameter, and quantized again each step.
  bool int8_state = false;
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
  // The moments, parallel to the parameters (for checkpoints and tests); undefined for frozen ones. F32 values,
  // or with int8 state the U8 codes, whose blocks' absmax values are the *_absmax lists (else undefined).
  const std::vector<Tensor>& first_moments() const { return m_; }
  const std::vector<Tensor>& second_moments() const { return v_; }
  const std::vector<Tensor>& first_moment_absmax() const { return m_absmax_; }
  const std::vector<Tensor>& second_moment_absmax() const { return v_absmax_; }
  // The lists above as a training state names them: "adam_m", "adam_v", and with int8 state "adam_m_absmax",
  // "adam_v_absmax".
  std::vector<std::pair<std::string, std::vector<Tensor>>> named_state() const;
  // Restores a saved state to resume exactly: named_state()'s lists in its order, each parallel to the parameters
  // (undefined for frozen ones), copied in.
  void restore(const std::vector<std::vector<Tensor>>& state, int64_t steps_taken);

 private:
  std::vector<Tensor> parameters_, gradients_, m_, v_, m_absmax_, v_absmax_;
  AdamWOptions options_;
  int64_t steps_ = 0;
};

}  // namespace moetune::train
