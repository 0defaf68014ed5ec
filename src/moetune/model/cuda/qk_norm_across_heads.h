// q/k RMSNorms across all heads on the GPU (AttentionSpec::qk_norm_across_heads: OLMoE's q_norm over all of q_proj's
// output, k_norm over all of k_proj's), around the per-head q/k/v kernel (ops/cuda/qkv_rope.h), which then runs
// RoPE alone. Built from RMSNorm's column-block kernels, which norm a block of the qkv matrix's columns in place of
// a head: the statistics of a token's whole q (or k) width are one row's.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::model::cuda {

struct QkWidths {
  int64_t q = 0, k = 0;  // q's columns of qkv (heads · head_dim), then k's; v's follow
};

// qkv BF16 [T, q + 2k] -> a new [T, q + 2k]: q's and k's columns normed over their whole widths (weights [q], [k]),
// v's copied.
Tensor qkv_normed_across_heads(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, double eps,
                               QkWidths widths);

// dqkv holds the gradient of qkv_normed_across_heads' output (the per-head kernel's backward without norms): its
// q and k columns become the gradient of qkv's, in place; dq_norm / dk_norm (undefined: frozen) get the weights'.
void qk_norm_across_heads_backward(const Tensor& dqkv, const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                                   double eps, QkWidths widths, const Tensor& dq_norm, const Tensor& dk_norm);

}  // namespace moetune::model::cuda
