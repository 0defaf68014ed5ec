// The softmax top-k router on the GPU (the CPU reference is ops/router.h): fp32 logits in, fp32 probabilities,
// the k most probable experts per token and their combine weights out. All tensors live on the GPU and every
// call is queued on gpu::stream() without waiting for it.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// logits F32 [T, E] (E ≤ 512) -> expert_ids I32 [T, k] (most probable first, ties to the lower index) and
// weights F32 [T, k] (renormalised over the k when `normalize`); 1 ≤ k ≤ min(16, E).
void router_topk_forward(const Tensor& logits, int64_t top_k, bool normalize, const Tensor& expert_ids,
                         const Tensor& weights);

// Given dweights F32 [T, k]: writes dlogits F32 [T, E] through the renormalisation and the softmax, which is
// recomputed from logits. expert_ids and weights are the forward's outputs.
void router_topk_backward(const Tensor& logits, const Tensor& expert_ids, const Tensor& weights,
                          const Tensor& dweights, bool normalize, const Tensor& dlogits);

}  // namespace moetune::ops::cuda
