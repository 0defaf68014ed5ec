// The memory a full fine-tune holds for its whole run, per optimizer precision: weights, gradients,
// master copy and AdamW moments. Activations depend on the recipe (sequence, micro-batch, recomputation)
// and are planned by the training step, not here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moetune::model {

struct PrecisionPlan {
  std::string name;         // recipe spelling: fp32_master, bf16_stochastic_rounding, pure_bf16, cpu_fp32
  std::string description;
  int64_t weight_bytes;     // per parameter, for each part
  int64_t gradient_bytes;
  int64_t master_bytes;
  int64_t optimizer_bytes;  // AdamW's two moments

  int64_t bytes_per_parameter() const { return weight_bytes + gradient_bytes + master_bytes + optimizer_bytes; }
};

const std::vector<PrecisionPlan>& precision_plans();

}  // namespace moetune::model
