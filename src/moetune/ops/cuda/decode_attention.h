// Attention of a few new tokens against the keys and values of the whole sequence so far (generation with a KV
// cache): the new tokens are the last n of the L keys, and new token i (position p = L - n + i) sees keys [0, p],
// as ops/attention.h's causal_attention_forward does when k and v hold more tokens than q. GQA: query head h reads
// key/value head h / (heads / kv_heads). The layer's variants as ops/attention.h's AttentionVariant has them: a
// sliding window (keys [max(0, p - window + 1), p]: itself and the window - 1 before it) and per-head sinks (a
// learned logit that joins each softmax's denominator and has no value).
//
// Our own split-K ("flash decoding") kernel rather than cuDNN: at one query per head the work is reading the
// cache once, so what matters is spreading the keys over enough blocks to keep every SM's loads in flight (a
// head per block would use 32 of 132 SMs); cuDNN's SDPA would need a graph per cache length (its shapes are part
// of the graph) or a padded ragged layout rebuilt each token. Each block reduces kDecodeKeysPerSplit keys of one
// query head to a running max, a sum of exponentials and an fp32 output row; a second kernel merges the splits
// and the sink. With a window, only the chunks that some new token sees are launched: a long sequence's windowed
// layer reads its window, not the whole cache. BF16 storage, fp32 math.
#pragma once

#include <cstdint>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// q BF16 [n, heads, d]; k BF16 [L, kv_heads, d] and v BF16 [L, kv_heads, dv] with L ≥ n (contiguous, e.g. the
// first L rows of a preallocated cache); out BF16 [n, heads, dv]. heads % kv_heads == 0, d and dv ≤ 256 (they
// differ in multi-head latent attention: DeepSeek-V3's 192 and 128). `scale` multiplies q·k (the
// training forward's softmax scale, YaRN's included). window: 0 for none, else > 0. sinks: undefined for none,
// else F32 or BF16 [heads] on the GPU (as the attention block holds them). Queued on gpu::stream().
void decode_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                              int64_t window = 0, const Tensor& sinks = {});

// Multi-head latent attention with kv_b absorbed (DeepSeek-V2's paper): every query head reads the one cache row a
// key has, cache BF16 [L, d] (the normed latent, then the rotated rope key: d = 576 on DeepSeek-V3), its first
// value_width columns being the value (the latent); q BF16 [n, heads, d] (q_nope·W_uk, then q's rotated rope part);
// out BF16 [n, heads, value_width], the attention-weighted latent. d ≤ 576.
void decode_latent_attention_forward(const Tensor& q, const Tensor& cache, int64_t value_width, double scale,
                                     const Tensor& out);

}  // namespace moetune::ops::cuda
