// The mixture-of-experts feed-forward half of a Qwen3-MoE layer: route each token of rms_norm(h) to its top-k
// experts, run them in expert-major order, combine with the routing weights, add to h.
#pragma once

#include "moetune/model/block_params.h"
#include "moetune/ops/experts.h"
#include "moetune/ops/permute.h"
#include "moetune/ops/router.h"

namespace moetune::model {

class MoeBlock {
 public:
  MoeBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config);

  Tensor forward(const Tensor& h);
  // d(h), residual included. `drouter_logits` [T, E] is the aux loss's gradient for this layer's router
  // logits (undefined when there is none).
  Tensor backward(const Tensor& dout, const Tensor& drouter_logits);
  const ops::Routing& routing() const { return routing_; }
  size_t stash_bytes() const;
  void clear_stash();

 private:
  const io::ModelConfig& config_;
  MoeParams p_;
  Tensor input_;                        // h, the norm's input
  ops::Routing routing_;                // logits, choices, weights
  ops::ExpertPermutation permutation_;
  Tensor permuted_;                     // [T*k, H] the experts' input
  ops::ExpertActivations activations_;  // pre-activation and output per permuted row
};

}  // namespace moetune::model
