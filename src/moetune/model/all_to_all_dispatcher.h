// Expert parallelism's dispatcher: the experts are split over the ranks of an expert-parallel group, each
// rank routes its own tokens, and the rows travel to the rank that owns their expert and back (Megatron's
// "alltoall" dispatcher, dropless). Forward: permute into expert-major order over all experts, exchange the
// per-expert counts, send each rank the rows of its experts, regroup what arrives (source-major) into
// expert-major order for the grouped GEMMs; combine sends the outputs back and sums each token's k outputs
// with its weights. The backward pass is the mirror image.
#pragma once

#include <memory>

#include "moetune/model/all_to_all_plan.h"
#include "moetune/model/token_dispatcher.h"
#include "moetune/parallel/communicator.h"

namespace moetune::model {

class AllToAllDispatcher final : public TokenDispatcher {
 public:
  // `group`: the expert-parallel group; rank r of it holds experts [r · E / size, (r + 1) · E / size).
  AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group);

  DispatchedTokens dispatch(const Tensor& x, const ops::Routing& routing) override;
  Tensor combine(const Tensor& expert_out, const ops::Routing& routing) override;
  // Uses the output rows combine() received back, not `expert_out` (this rank's experts' rows).
  ops::CombineGrads combine_backward(const Tensor& dout, const Tensor& expert_out, const ops::Routing& routing) override;
  Tensor dispatch_backward(const Tensor& drows, int64_t tokens) override;
  size_t stash_bytes() const override;
  void clear() override;

 private:
  // Rows in this rank's routing order -> the owners' expert-major rows, and back.
  Tensor send_to_experts(const Tensor& rows) const;
  Tensor send_to_tokens(const Tensor& rows) const;

  int64_t num_experts_, local_experts_;
  std::shared_ptr<parallel::Communicator> group_;
  ops::ExpertPermutation permutation_;   // this rank's tokens in expert-major order over all experts
  AllToAllPlan plan_;
  Tensor returned_;                      // the experts' outputs for this rank's rows, in its routing order
};

}  // namespace moetune::model
