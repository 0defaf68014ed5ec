#include "moetune/model/moe_block.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

MoeBlock::MoeBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config)
    : config_(config), p_(MoeParams::lookup(store, prefix)) {}

Tensor MoeBlock::forward(const Tensor& h) {
  input_ = h;
  const Tensor normed = ops::rms_norm(h, p_.norm.value, config_.rms_norm_eps);
  routing_ = ops::route_softmax_topk(ops::linear(normed, p_.router.value), config_.num_experts_per_tok, config_.norm_topk_prob);
  permutation_ = ops::plan_permutation(routing_, config_.num_experts);
  permuted_ = ops::permute_tokens(normed, permutation_);
  activations_ = ops::expert_mlp(permuted_, permutation_.offsets, p_.gate_up.value, p_.down.value);
  return add(h, ops::combine_experts(activations_.out, permutation_, routing_));
}

Tensor MoeBlock::backward(const Tensor& dout, const Tensor& drouter_logits) {
  const int64_t tokens = dout.size(0);
  ops::CombineGrads combine = ops::combine_experts_backward(dout, activations_.out, permutation_, routing_);
  Tensor dpermuted = ops::expert_mlp_backward(combine.dexpert_out, permuted_, activations_, permutation_.offsets,
                                              p_.gate_up.value, p_.down.value, p_.gate_up.grad, p_.down.grad);
  Tensor dnormed = ops::permute_tokens_backward(dpermuted, permutation_, tokens);
  Tensor dlogits = ops::route_softmax_topk_backward(routing_, combine.dweight);
  if (drouter_logits.defined()) dlogits = add(dlogits, drouter_logits);
  const Tensor normed = ops::rms_norm(input_, p_.norm.value, config_.rms_norm_eps);
  dnormed = add(dnormed, ops::linear_backward(dlogits, normed, p_.router.value, p_.router.grad));
  return add(dout, ops::rms_norm_backward(dnormed, input_, p_.norm.value, config_.rms_norm_eps, p_.norm.grad));
}

size_t MoeBlock::stash_bytes() const {
  return held_bytes({&input_, &routing_.logits, &permuted_, &activations_.gate_up, &activations_.out}) +
         routing_.expert.size() * sizeof(int32_t) + routing_.weight.size() * sizeof(float) +
         (permutation_.source.size() + permutation_.row_of.size() + permutation_.offsets.size()) * sizeof(int64_t);
}

void MoeBlock::clear_stash() {
  input_ = permuted_ = Tensor();
  routing_ = {};
  permutation_ = {};
  activations_ = {};
}

}  // namespace moetune::model
