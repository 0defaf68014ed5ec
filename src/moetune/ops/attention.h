// Causal grouped-query attention over packed rows: token t attends to the tokens of its own document up to
// itself, skipping padding keys. Query head h reads key/value head h / (heads / kv_heads). GPT-OSS adds a
// sliding window and per-head sinks (AttentionVariant).
#pragma once

#include <optional>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops {

struct AttentionMask {
  std::vector<int64_t> document_start;  // per token: index of the first token of its document (row or packed doc)
  std::vector<uint8_t> key_valid;       // per token: 0 for padding that no query may see; empty when none
};

// What a layer may add to plain causal attention (transformers' gpt_oss: sliding_attention layers, sinks).
struct AttentionVariant {
  // Query t sees keys t - window + 1 .. t (transformers' sliding_window_overlay: kv_idx > q_idx - window), counted
  // in token indices, within its document.
  std::optional<int64_t> sliding_window;
  // [nq] fp32: one learned logit per query head that joins every softmax's denominator and is dropped after it,
  // so a head can attend to "nothing" (eager_attention_forward's `sinks`). Undefined: none.
  Tensor sinks;
};

// q [T, nq, d], k and v [T, nkv, d]. Returns [T, nq, d]; a query with no visible key gets zeros.
// For generation with a KV cache, k and v may hold P more tokens than q, before q's (the mask then covers all
// P + T): q's token t is token P + t of the sequence and sees its keys up to P + t.
Tensor causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale,
                                const AttentionVariant& variant = {});

struct AttentionGrads {
  Tensor dq, dk, dv;
  Tensor dsinks;  // [nq], when the variant has sinks
};

// The probabilities are recomputed from q and k (the stash is q, k, v and the output), as flash attention does.
// q, k and v hold the same tokens.
AttentionGrads causal_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const AttentionMask& mask, double scale,
                                         const AttentionVariant& variant = {});

}  // namespace moetune::ops
