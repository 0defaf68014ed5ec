// Attention of a few new tokens against the keys and values of the whole sequence so far (generation with a KV
// cache): the new tokens are the last n of the L keys, and new token i sees keys [0, L - n + i], as
// ops/attention.h's causal_attention_forward does when k and v hold more tokens than q. GQA: query head h reads
// key/value head h / (heads / kv_heads).
//
// Our own split-K ("flash decoding") kernel rather than cuDNN: at one query per head the work is reading the
// cache once, so what matters is spreading the keys over enough blocks to keep every SM's loads in flight (a
// head per block would use 32 of 132 SMs); cuDNN's SDPA would need a graph per cache length (its shapes are part
// of the graph) or a padded ragged layout rebuilt each token. Each block reduces kDecodeKeysPerSplit keys of one
// query head to a running max, a sum of exponentials and an fp32 output row; a second kernel merges the splits.
// BF16 storage, fp32 math.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// q BF16 [n, heads, d]; k and v BF16 [L, kv_heads, d] with L ≥ n (contiguous, e.g. the first L rows of a
// preallocated cache); out BF16 [n, heads, d]. heads % kv_heads == 0, d ≤ 256. Queued on gpu::stream().
void decode_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out);

}  // namespace moetune::ops::cuda
