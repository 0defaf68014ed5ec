// Token embedding on the GPU: the lookup and its deterministic gradient (ops/embedding.h semantics, with I32 ids
// on the device; the host has checked them against the vocabulary before upload).
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// ids I32 [T], table BF16 [V, H] -> out BF16 [T, H], each row times `scale` in fp32 (Gemma's embed_scale; 1
// elsewhere). An id outside [0, V) is not read: its row of out is zeros.
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, float scale = 1.0f);

// dtable (BF16 or F32 [V, H]) [id] += Σ over positions t with ids[t] = id of dout[t] (BF16 [T, H]): positions
// sorted by id, one fp32 sum per (id, column) in position order, added once, so the result is deterministic. Only
// the rows of ids that occur are touched; ids outside [0, V) are skipped, and so is `padding_row` (nn.Embedding's
// padding_idx; -1: none). With `scale`, each dout row counts scale times (the forward's factor).
void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, int64_t padding_row = -1,
                        float scale = 1.0f);

}  // namespace moetune::ops::cuda
