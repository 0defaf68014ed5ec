// DeepSeek-V3's auxiliary-loss-free load balancing (DeepSeek-V3 technical report, §2.1.2), a recipe option
// (training.router_bias_update_rate, off by default as in transformers, which never moves the bias): after each
// optimizer step every MoE layer's e_score_correction_bias moves by a fixed rate toward balance, down for an
// expert that received more tokens than the mean in that step, up for one that received fewer. The bias only
// steers the choice, so this changes which experts tokens go to, never the combine weights' gradients.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/router.h"

namespace moetune::model {

// Adds to load [E] the number of choices each expert got in `routing`, padding (token_valid 0) not counted.
void add_expert_load(const ops::Routing& routing, const std::vector<uint8_t>& token_valid, std::vector<double>& load);

// bias[e] += rate · sign(mean(load) − load[e]) (an expert exactly at the mean keeps its bias); fp32 bias [E].
void balance_correction_bias(const Tensor& bias, const std::vector<double>& load, double rate);

}  // namespace moetune::model
