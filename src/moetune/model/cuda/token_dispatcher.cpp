#include "moetune/model/cuda/token_dispatcher.h"

#include "moetune/model/block_util.h"

namespace moetune::model::cuda {

DispatchedTokens LocalDispatcher::dispatch(const Tensor& x, const Tensor& expert_ids) {
  plan_ = ops::cuda::plan_permutation(expert_ids, num_experts_);
  Tensor rows = Tensor::empty({expert_ids.numel(), x.size(1)}, x.dtype(), Device::cuda());
  ops::cuda::permute_tokens(x, plan_, rows);
  return {rows, plan_.offsets};
}

void LocalDispatcher::combine(const Tensor& expert_out, const Tensor& weights, const Tensor& out, const Tensor& residual) {
  ops::cuda::combine_experts(expert_out, plan_, weights, out, residual);
}

void LocalDispatcher::combine_backward(const Tensor& dout, const Tensor& expert_out, const Tensor& weights,
                                       const Tensor& dexpert_out, const Tensor& dweights) {
  ops::cuda::combine_experts_backward(dout, expert_out, plan_, weights, dexpert_out, dweights);
}

void LocalDispatcher::dispatch_backward(const Tensor& drows, const Tensor& dx) {
  ops::cuda::permute_tokens_backward(drows, plan_, dx);
}

size_t LocalDispatcher::stash_bytes() const { return held_bytes({&plan_.offsets, &plan_.row_of, &plan_.source}); }

}  // namespace moetune::model::cuda
