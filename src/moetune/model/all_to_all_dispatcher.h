// Expert parallelism's dispatcher on the CPU: the experts are split over the ranks of an expert-parallel group,
// each rank routes its own tokens, and each token travels once to each rank that holds any of its experts (the
// scheme and the host plan are model/token_exchange.h; the GPU dispatcher, model/cuda/all_to_all_dispatcher.h,
// runs the same exchange with NCCL). The receiving rank permutes the received tokens' choices into expert-major
// order for its own experts, with one extra expert last for the choices made elsewhere (rows it never computes),
// and sends back one row per token: the routing-weighted sum of its experts' outputs, which the source adds up
// over the ranks. Backward: d(out) travels the same way; the receiver returns, per token, the sum of d(rows) and
// the routing weights' gradient of its choices (0 for choices made elsewhere); the source adds them up too.
// Host loops throughout: this is the fp32 reference the GPU dispatcher is checked against.
#pragma once

#include <memory>

#include "moetune/model/token_dispatcher.h"
#include "moetune/model/token_exchange.h"
#include "moetune/parallel/communicator.h"

namespace moetune::model {

class AllToAllDispatcher final : public TokenDispatcher {
 public:
  // `group`: the expert-parallel group; rank r of it holds experts [r · E / size, (r + 1) · E / size).
  AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group);

  DispatchedTokens dispatch(const Tensor& x, const ops::Routing& routing) override;
  Tensor combine(const Tensor& expert_out, const ops::Routing& routing) override;
  // `expert_out`: this rank's experts' rows, as dispatch() handed them out; the weights used are the received ones.
  ops::CombineGrads combine_backward(const Tensor& dout, const Tensor& expert_out, const ops::Routing& routing) override;
  Tensor dispatch_backward(const Tensor& drows, int64_t tokens) override;
  size_t stash_bytes() const override;
  void clear() override;

 private:
  // [T, C] rows of this rank's tokens -> [received tokens, C] on the ranks they go to, and back.
  Tensor send_out(const Tensor& token_rows) const;
  Tensor send_back(const Tensor& received_rows) const;
  // What the ranks sent back [sent rows, C] -> [T, C]: each token's rows summed over the ranks it went to.
  Tensor sum_over_ranks(const Tensor& returned) const;
  // This rank's expert rows [received choices, C] -> one row per received choice, zeros for the extra expert's,
  // so the single-device permutation ops serve unchanged (they add exact zeros for choices made elsewhere).
  Tensor with_rows_for_every_choice(const Tensor& kept_rows) const;
  // The received tokens' choices as this rank numbers its experts, and their weights (0 for choices made elsewhere).
  ops::Routing receive_routing(const ops::Routing& routing) const;

  int64_t num_experts_;
  std::shared_ptr<parallel::Communicator> group_;
  TokenSends sends_;                     // this rank's tokens: where they go
  TokenReceipts receipts_;               // what arrives here
  ops::Routing received_;                // the received tokens' routing, over this rank's experts + 1
  ops::ExpertPermutation received_plan_;  // their choices, expert-major; this rank's rows come first
};

}  // namespace moetune::model
