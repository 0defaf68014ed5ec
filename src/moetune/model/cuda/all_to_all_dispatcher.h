// Expert parallelism's dispatcher on the GPU: each token travels once to each rank that holds any of its
// experts (model/token_exchange.h has the scheme; its CPU twin, model/all_to_all_dispatcher.h, exchanges the
// same rows with host loops). The exchange is planned on the GPU from the router's choices; the host waits
// once per layer in the forward pass for the per-rank counts (it must size the NCCL transfers, as Megatron's
// all-to-all dispatcher does); the rows, the choices and the routing weights travel with NCCL; the receiving rank permutes what arrives into expert-major
// order with one extra expert for choices made elsewhere (rows it never copies), and sends back one combined row
// per token. The backward pass sends the output gradient the same way and returns the input gradient and the
// routing weights' gradient.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "moetune/model/cuda/token_dispatcher.h"
#include "moetune/ops/cuda/exchange_plan.h"
#include "moetune/model/token_exchange.h"
#include "moetune/parallel/communicator.h"

namespace moetune::model::cuda {

class AllToAllDispatcher final : public TokenDispatcher {
 public:
  // overlap: run the backward's d(x) transfer beside the experts' weight gradients (transfers()).
  AllToAllDispatcher(int64_t num_experts, std::shared_ptr<parallel::Communicator> group, bool overlap = true);
  ~AllToAllDispatcher() override;
  AllToAllDispatcher(const AllToAllDispatcher&) = delete;
  AllToAllDispatcher& operator=(const AllToAllDispatcher&) = delete;
  DispatchedTokens dispatch(const Tensor& x, const Tensor& expert_ids) override;
  void combine(const Tensor& expert_out, const Tensor& weights, const Tensor& out, const Tensor& residual) override;
  void combine_backward(const Tensor& dout, const Tensor& expert_out, const Tensor& weights, const Tensor& dexpert_out,
                        const Tensor& dweights) override;
  void dispatch_backward(const Tensor& drows, const Tensor& dx) override;
  bool transfers() const override { return overlap_; }
  void begin_dispatch_backward(const Tensor& drows) override;
  void end_dispatch_backward(const Tensor& dx) override;
  size_t stash_bytes() const override;
  void clear() override;

 private:
  // [T, C] rows of this rank's tokens -> [received tokens, C] on the ranks they go to, and back.
  Tensor send_out(const Tensor& token_rows) const;
  Tensor send_back(const Tensor& received_rows) const;

  int64_t num_experts_;
  std::shared_ptr<parallel::Communicator> group_;
  bool overlap_;
  ops::cuda::DeviceTokenSends sends_;  // this rank's tokens: where they go
  TokenReceipts receipts_;             // what arrives here
  ops::cuda::DevicePermutation received_plan_;  // the received tokens' choices, expert-major, this rank's rows kept
  Tensor received_weights_;             // F32 [received tokens, k]: their routing weights (0 where not ours)
  // The backward pass's return trip of d(x), on a stream of its own while the weight gradients run.
  cudaStream_t transfer_stream_ = nullptr;
  cudaEvent_t queued_ = nullptr, transferred_ = nullptr;
  Tensor received_dx_, returned_dx_;    // held until end_dispatch_backward: the transfer reads and writes them
};

}  // namespace moetune::model::cuda
