// GPT-OSS's learned attention sinks on the GPU, applied around cuDNN's flash attention rather than inside it.
// A sink is one extra logit s_h per query head that joins the softmax's denominator and has no value row, so with
// L the log-sum-exp of a query's scaled scores (flash attention's statistics) the sink-aware output is the plain
// output times exp(L) / (exp(L) + exp(s_h)) = σ(L − s_h), and its log-sum-exp is L' = logaddexp(L, s_h).
// The backward needs nothing new from cuDNN: given L' and the rescaled output, its dq/dk/dv are those of the sink
// softmax (P = exp(S − L') are the true probabilities and D = rowsum(dO ⊙ O) the true Σ p·dp, since the sink's
// value is zero), and the sink's own gradient is ds_h = −Σ_t exp(s_h − L'_t) · D_t.
// Why not cuDNN's sink_token: it needs cuDNN ≥ 9.13 for the forward and its ragged (THD) support is not
// documented; these two passes (one over the output, one reduction) work with any cuDNN and cost a few percent
// of the attention itself.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// out BF16 [T, heads, d] and stats F32 [T, heads] as causal_attention_forward wrote them; sinks BF16 or F32
// [heads]. Rescales out and turns stats into the sink-aware log-sum-exp, both in place.
void attention_sinks_forward(const Tensor& sinks, const Tensor& out, const Tensor& stats);

// dout and out BF16 [T, heads, d] (out and stats as attention_sinks_forward left them). Adds the sinks' gradient
// into dsinks (BF16 or F32 [heads]), summed over the tokens in a fixed order (deterministic).
void attention_sinks_backward(const Tensor& sinks, const Tensor& dout, const Tensor& out, const Tensor& stats,
                              const Tensor& dsinks);

}  // namespace moetune::ops::cuda
