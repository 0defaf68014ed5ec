// Causal grouped-query attention over packed rows: token t attends to the tokens of its own document up to
// itself, skipping padding keys. Query head h reads key/value head h / (heads / kv_heads).
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops {

struct AttentionMask {
  std::vector<int64_t> document_start;  // per token: index of the first token of its document (row or packed doc)
  std::vector<uint8_t> key_valid;       // per token: 0 for padding that no query may see; empty when none
};

// q [T, nq, d], k and v [T, nkv, d]. Returns [T, nq, d]; a query with no visible key gets zeros.
Tensor causal_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask, double scale);

struct AttentionGrads {
  Tensor dq, dk, dv;
};

// The probabilities are recomputed from q and k (the stash is q, k, v and the output), as flash attention does.
AttentionGrads causal_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const AttentionMask& mask, double scale);

}  // namespace moetune::ops
