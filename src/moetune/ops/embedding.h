// Token embedding lookup and its gradient (a scatter-add into the rows that were read).
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

// ids [N] (i64) -> [N, H], the rows times `scale` (Gemma's embed_scale; 1 elsewhere); an id outside the table is
// an Error naming it and its position.
Tensor embedding_forward(const Tensor& ids, const Tensor& table, float scale = 1.0f);
// dtable undefined: a frozen table, nothing to do. Positions whose id is `padding_row` (nn.Embedding's
// padding_idx; -1: none) add nothing; the others add scale · dout.
void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, int64_t padding_row = -1,
                        float scale = 1.0f);

}  // namespace moetune::ops
