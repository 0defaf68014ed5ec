// The clipping norm's share of the experts' weight gradients, summed where they are made: the grouped GEMM that
// writes an expert weight's gradient whole can also write partial sums of its squares
// (ops/cuda/grouped_gemm.h: grouped_matmul_weight_grad's norm partials), so that the optimizer's norm pass
// (ops/cuda/grad_norm.h) need not read that gradient back: 3.3 GB a step on the Moonlight cut, ~0.85 ms.
//
// The GPU engine arms it for a step of one micro-batch (one rank, clipping, the norm pass after the backward
// pass): then each MoE block whose backward pass writes its expert gradients whole (StepContext::
// overwrite_gradients, unpadded experts) claims a buffer per gradient, and the optimizer takes what was claimed,
// adds those partials in and leaves those gradients out of its pass. A gradient no block claimed (accumulated over
// micro-batches, padded experts, frozen) is read by the pass as before. The partials have fixed bits for a given
// gradient, so a step's norm is as reproducible as the pass's; it is not the pass's bits (other partial sums).
#pragma once

#include <map>

#include "moetune/core/tensor.h"

namespace moetune::model::cuda {

class ExpertNormPartials {
 public:
  // On: the backward passes that follow may claim (the step's only micro-batch). Off: claims give nothing.
  void arm(bool on) { armed_ = on; }
  // Where the weight gradient `grad` ([experts, n, k], written whole by the grouped GEMM that is about to run)
  // puts its norm partials: a buffer of this object's, made on the first claim and kept; undefined when not armed.
  Tensor claim(const Tensor& grad);
  // The partials of the gradients claimed since the last take, by their gradient's address; forgets the claims.
  std::map<const void*, Tensor> take();

 private:
  bool armed_ = false;
  std::map<const void*, Tensor> buffers_;  // by gradient address
  std::map<const void*, Tensor> claimed_;
};

}  // namespace moetune::model::cuda
