// The MoE layer's middle part: tokens go to their experts and come back. The MoE block is router -> dispatcher
// -> grouped experts; only the dispatcher knows where the experts live. LocalDispatcher (all experts here, a
// permutation into expert-major order) is the first implementation; an all-to-all one swaps in for expert
// parallelism without the block changing (torchtitan's token_dispatcher, Megatron's MoE dispatchers).
#pragma once

#include <memory>
#include <vector>

#include "moetune/ops/permute.h"
#include "moetune/ops/router.h"

namespace moetune::model {

struct DispatchedTokens {
  Tensor rows;                   // [R, H] the rows this rank's experts compute, expert-major
  std::vector<int64_t> offsets;  // [local experts + 1]: expert e owns rows [offsets[e], offsets[e + 1])
};

class TokenDispatcher {
 public:
  virtual ~TokenDispatcher() = default;
  // x [T, H] and the routing -> the rows for this rank's experts. Keeps what combine and the backward need.
  virtual DispatchedTokens dispatch(const Tensor& x, const ops::Routing& routing) = 0;
  // The experts' output rows [R, H] -> [T, H]: each token's k outputs weighted by the routing weights and summed.
  virtual Tensor combine(const Tensor& expert_out, const ops::Routing& routing) = 0;
  // d(out) [T, H] -> d(expert_out) [R, H] and d(routing weights) [T·k].
  virtual ops::CombineGrads combine_backward(const Tensor& dout, const Tensor& expert_out, const ops::Routing& routing) = 0;
  // d(rows) [R, H] -> d(x) [T, H].
  virtual Tensor dispatch_backward(const Tensor& drows, int64_t tokens) = 0;
  virtual size_t stash_bytes() const = 0;
  virtual void clear() = 0;
};

// Every expert on this device: a stable permutation into expert-major order.
class LocalDispatcher final : public TokenDispatcher {
 public:
  explicit LocalDispatcher(int64_t num_experts) : num_experts_(num_experts) {}
  DispatchedTokens dispatch(const Tensor& x, const ops::Routing& routing) override;
  Tensor combine(const Tensor& expert_out, const ops::Routing& routing) override;
  ops::CombineGrads combine_backward(const Tensor& dout, const Tensor& expert_out, const ops::Routing& routing) override;
  Tensor dispatch_backward(const Tensor& drows, int64_t tokens) override;
  size_t stash_bytes() const override;
  void clear() override { permutation_ = {}; }

 private:
  int64_t num_experts_;
  ops::ExpertPermutation permutation_;
};

}  // namespace moetune::model
