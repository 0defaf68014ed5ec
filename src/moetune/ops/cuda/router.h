// The softmax top-k router on the GPU (the CPU reference is ops/router.h): fp32 logits in, fp32 probabilities,
// the k most probable experts per token and their combine weights out. All tensors live on the GPU and every
// call is queued on gpu::stream() without waiting for it.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/router.h"

namespace moetune::ops::cuda {

// logits F32 [T, E] (E ≤ 512) -> expert_ids I32 [T, k] (most probable first, ties to the lower index) and
// weights F32 [T, k] (renormalised over the k when `normalize`); 1 ≤ k ≤ min(16, E). `options`: DeepSeek-V2's
// group limit (at most 32 groups) and weight factor, as the CPU's ops::router_topk_forward takes them.
void router_topk_forward(const Tensor& logits, int64_t top_k, bool normalize, const Tensor& expert_ids,
                         const Tensor& weights, const SoftmaxTopkOptions& options = {});

// Given dweights F32 [T, k]: writes dlogits F32 [T, E] through the weights' factor `scaling`, the
// renormalisation and the softmax, which is recomputed from logits. expert_ids and weights are the forward's
// outputs.
void router_topk_backward(const Tensor& logits, const Tensor& expert_ids, const Tensor& weights, const Tensor& dweights,
                          bool normalize, const Tensor& dlogits, float scaling = 1.0f);

}  // namespace moetune::ops::cuda
