// Nemotron-H's MoE mixer on the CPU (NemotronHMoE in transformers 5.17): DeepSeek-V3's sigmoid group-limited
// router (ops/sigmoid_router.h) on the hidden state; routed experts that are relu² MLPs without a gate
// (down_e(relu(up_e x)²)), optionally inside a latent space (fc1_latent_proj into moe_latent_size before the
// experts, fc2_latent_proj back after the weighted sum); a relu² shared expert on the hidden state, added
// unscaled. A reference composition (a loop over each token's experts, as transformers' eager experts do); the
// engine's MoE block will run the same math through its dispatcher once relu² experts are an expert variant.
#pragma once

#include <optional>

#include "moetune/core/tensor.h"
#include "moetune/ops/router.h"
#include "moetune/ops/sigmoid_router.h"

namespace moetune::model {

struct LatentMoeSpec {
  ops::GroupLimitedRouter router;
  bool has_latent = false;  // moe_latent_size set
};

// HF shapes: router [E, H], correction_bias [E] (a frozen buffer), up [E, I, D], down [E, D, I] with D the latent
// size (or H), shared_up [Is, H], shared_down [H, Is], fc1 [D, H], fc2 [H, D]; biases (mlp_bias) undefined when
// absent, fc1/fc2 undefined without a latent. As gradients, undefined means frozen.
struct LatentMoeWeights {
  Tensor router, correction_bias, up, down;
  Tensor shared_up, shared_up_bias, shared_down, shared_down_bias;
  Tensor fc1, fc1_bias, fc2, fc2_bias;
};

struct LatentMoeStash {
  Tensor input, latent, combined;  // x, the experts' input, their weighted sum (before fc2)
  ops::Routing routing;
};

// x [T, H] -> [T, H]. Fills `stash` when given.
Tensor latent_moe_forward(const LatentMoeSpec& spec, const LatentMoeWeights& weights, const Tensor& x,
                          LatentMoeStash* stash);

// Given dy [T, H]: accumulates every weight's gradient into `grads` and returns dx.
Tensor latent_moe_backward(const LatentMoeSpec& spec, const LatentMoeWeights& weights, const Tensor& dy,
                           const LatentMoeStash& stash, const LatentMoeWeights& grads);

}  // namespace moetune::model
