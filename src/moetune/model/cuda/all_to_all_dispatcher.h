// Expert parallelism's dispatcher on the GPU (the CPU twin, and the scheme, are in model/all_to_all_dispatcher.h):
// permute into expert-major order over all experts on the device, read the per-expert counts back (the host
// must size the exchange: one wait per layer and direction, as Megatron's all-to-all dispatcher does), exchange
// the counts and then the rows with NCCL, and regroup what arrives into expert-major order; combine and the
// backward pass send the rows the other way.
#pragma once

#include <memory>

#include "moetune/model/all_to_all_plan.h"
#include "moetune/model/cuda/token_dispatcher.h"
#include "moetune/parallel/communicator.h"

namespace moetune::model::cuda {

class AllToAllDispatcher final : public TokenDispatcher {
 public:
  AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group);
  DispatchedTokens dispatch(const Tensor& x, const Tensor& expert_ids) override;
  void combine(const Tensor& expert_out, const Tensor& weights, const Tensor& out, const Tensor& residual) override;
  // Uses the rows combine() received back, not `expert_out` (this rank's experts' rows).
  void combine_backward(const Tensor& dout, const Tensor& expert_out, const Tensor& weights, const Tensor& dexpert_out,
                        const Tensor& dweights) override;
  void dispatch_backward(const Tensor& drows, const Tensor& dx) override;
  size_t stash_bytes() const override;
  void clear() override;

 private:
  // Rows in this rank's routing order [T·k, H] -> the expert-major rows of this rank's experts [R, H], and back.
  void send_to_experts(const Tensor& rows, const Tensor& out) const;
  Tensor send_to_tokens(const Tensor& rows) const;

  int64_t num_experts_;
  std::shared_ptr<parallel::Communicator> group_;
  ops::cuda::DevicePermutation permutation_;
  AllToAllPlan plan_;
  Tensor expert_major_, source_major_;  // I32 on the device: the regrouping and its inverse
  Tensor returned_;                     // the experts' outputs for this rank's rows, in its routing order
};

}  // namespace moetune::model::cuda
