#include "moetune/model/memory_plan.h"

namespace moetune::model {

const std::vector<PrecisionPlan>& precision_plans() {
  static const std::vector<PrecisionPlan> plans = {
      {"fp32_master", "bf16 weights and gradients, fp32 master weights and AdamW moments", 2, 2, 4, 8},
      {"bf16_stochastic_rounding", "bf16 weights updated with stochastic rounding, bf16 gradients, fp32 moments", 2, 2, 0, 8},
      {"pure_bf16", "bf16 weights, gradients and moments (what HF does for a model loaded in bf16)", 2, 2, 0, 4},
      {"cpu_fp32", "fp32 throughout (the CPU engine)", 4, 4, 0, 8},
  };
  return plans;
}

}  // namespace moetune::model
