// Causal grouped-query attention over packed rows: token t attends to the tokens of its own document up to
// itself. Query head h reads key/value head h / (heads / kv_heads).
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops {

// q [T, nq, d], k and v [T, nkv, d]; document_start[t] is the index of the first token of t's document.
// Returns [T, nq, d].
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& document_start,
                        double scale);

}  // namespace moetune::ops
