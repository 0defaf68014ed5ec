// Token embedding lookup and its gradient (a scatter-add into the rows that were read).
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

// ids [N] (i64) -> [N, H]; an id outside the table is an Error naming it and its position.
Tensor embedding_forward(const Tensor& ids, const Tensor& table);
// dtable undefined: a frozen table, nothing to do.
void embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable);

}  // namespace moetune::ops
