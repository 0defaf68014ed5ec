// GPT-OSS's router on the GPU (the CPU reference is ops/router.h's router_topk_then_softmax_*): top-k over the raw
// logits (their bias already added by the router's linear), then a softmax over only the k chosen. Beside the
// softmax-then-top-k router (router.h), which it does not replace. All tensors on the GPU, queued on gpu::stream().
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// logits F32 [T, E] (E ≤ 512) -> expert_ids I32 [T, k] (largest logit first, ties to the lower index) and
// weights F32 [T, k] (softmax over the k chosen logits); 1 ≤ k ≤ min(16, E).
void router_topk_softmax_forward(const Tensor& logits, int64_t top_k, const Tensor& expert_ids, const Tensor& weights);

// Given dweights F32 [T, k]: writes dlogits F32 [T, E] (zero off each token's chosen experts) through the softmax
// over the k, which needs only the forward's weights.
void router_topk_softmax_backward(const Tensor& expert_ids, const Tensor& weights, const Tensor& dweights,
                                  const Tensor& dlogits);

}  // namespace moetune::ops::cuda
