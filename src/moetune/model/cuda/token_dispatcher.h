// The GPU MoE layer's dispatcher (the CPU twin is model/token_dispatcher.h): tokens to the rows of this rank's
// experts and back. LocalDispatcher permutes into expert-major order on the device with no host round trip;
// an all-to-all dispatcher for expert parallelism implements the same interface.
#pragma once

#include "moetune/ops/cuda/permute.h"

namespace moetune::model::cuda {

struct DispatchedTokens {
  Tensor rows;     // BF16 [R, H], expert-major
  Tensor offsets;  // I32 [local experts + 1] on the device: expert e owns rows [offsets[e], offsets[e + 1])
};

class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  // x [T, H], expert_ids I32 [T, k] -> the rows for this rank's experts. Keeps the plan for what follows.
  virtual DispatchedTokens dispatch(const Tensor& x, const Tensor& expert_ids) = 0;
  // out[t] = residual[t] + Σ_j weights[t, j] · expert_out[row of (t, j)]; weights F32 [T, k].
  virtual void combine(const Tensor& expert_out, const Tensor& weights, const Tensor& out, const Tensor& residual) = 0;
  virtual void combine_backward(const Tensor& dout, const Tensor& expert_out, const Tensor& weights,
                                const Tensor& dexpert_out, const Tensor& dweights) = 0;
  // d(rows) [R, H] -> d(x) [T, H], written into dx.
  virtual void dispatch_backward(const Tensor& drows, const Tensor& dx) = 0;
  // The same in two halves, for a dispatcher whose return trip is a transfer (transfers() true): begin queues
  // it beside the current stream, end makes the current stream wait for it and writes dx. The MoE block runs
  // the experts' weight-gradient GEMMs in between, which need nothing from it.
  virtual bool transfers() const { return false; }
  virtual void begin_dispatch_backward(const Tensor& drows) { pending_drows_ = drows; }
  virtual void end_dispatch_backward(const Tensor& dx) {
    dispatch_backward(pending_drows_, dx);
    pending_drows_ = Tensor();
  }
  virtual size_t stash_bytes() const = 0;
  virtual void clear() = 0;

 private:
  Tensor pending_drows_;
};

class LocalDispatcher final : public TokenDispatcher {
 public:
  explicit LocalDispatcher(int64_t num_experts) : num_experts_(num_experts) {}
  DispatchedTokens dispatch(const Tensor& x, const Tensor& expert_ids) override;
  void combine(const Tensor& expert_out, const Tensor& weights, const Tensor& out, const Tensor& residual) override;
  void combine_backward(const Tensor& dout, const Tensor& expert_out, const Tensor& weights, const Tensor& dexpert_out,
                        const Tensor& dweights) override;
  void dispatch_backward(const Tensor& drows, const Tensor& dx) override;
  size_t stash_bytes() const override;
  void clear() override { plan_ = {}; }

 private:
  int64_t num_experts_;
  ops::cuda::DevicePermutation plan_;
};

}  // namespace moetune::model::cuda
