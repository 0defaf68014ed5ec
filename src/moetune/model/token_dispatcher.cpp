#include "moetune/model/token_dispatcher.h"

namespace moetune::model {

DispatchedTokens LocalDispatcher::dispatch(const Tensor& x, const ops::Routing& routing) {
  permutation_ = ops::plan_permutation(routing, num_experts_);
  return {ops::permute_tokens(x, permutation_), permutation_.offsets};
}

Tensor LocalDispatcher::combine(const Tensor& expert_out, const ops::Routing& routing) {
  return ops::combine_experts(expert_out, permutation_, routing);
}

ops::CombineGrads LocalDispatcher::combine_backward(const Tensor& dout, const Tensor& expert_out, const ops::Routing& routing) {
  return ops::combine_experts_backward(dout, expert_out, permutation_, routing);
}

Tensor LocalDispatcher::dispatch_backward(const Tensor& drows, int64_t tokens) {
  return ops::permute_tokens_backward(drows, permutation_, tokens);
}

size_t LocalDispatcher::stash_bytes() const {
  return (permutation_.source.size() + permutation_.row_of.size()) * sizeof(int64_t);  // the offsets go to the block
}

}  // namespace moetune::model
