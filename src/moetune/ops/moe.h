// Mixture-of-experts pieces: the softmax top-k router and the SwiGLU experts with the weighted combine.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops {

struct Routing {
  Tensor logits;                // [T, E], the router's raw scores (the aux loss reads these)
  std::vector<int32_t> expert;  // [T * k], token t's choices, best first
  std::vector<float> weight;    // [T * k]
  int64_t top_k = 0;
};

// Softmax over experts in fp32, top-k, renormalised to sum to one when `normalize` (norm_topk_prob).
Routing route_softmax_topk(const Tensor& x, const Tensor& router_weight, int64_t top_k, bool normalize);

// out[t] = Σ_j weight[t,j] · down_e(silu(gate_e x_t) ⊙ up_e x_t), e = expert[t,j];
// gate_up [E, 2I, H] (gate rows first), down [E, H, I].
Tensor moe_experts(const Tensor& x, const Routing& routing, const Tensor& gate_up, const Tensor& down);

// silu(gate) ⊙ up for gate_up [T, 2I] holding gate in the first I columns: returns [T, I].
Tensor swiglu(const Tensor& gate_up);

}  // namespace moetune::ops
