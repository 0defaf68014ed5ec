// The Mamba2 mixer's gated RMSNorm on the GPU (ops/mamba2.h semantics): BF16 rows read in place through
// ColumnBlocks, fp32 statistics per group of `group_size` columns, a deterministic weight gradient.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"

namespace moetune::ops::cuda {

// y = weight ⊙ rms_norm_per_group(x ⊙ silu(z)); x, z, y [N, D], weight [D] BF16.
void gated_rms_norm_forward(const ColumnBlock& x, const ColumnBlock& z, const Tensor& weight, int64_t group_size,
                            double eps, const ColumnBlock& y);

// Writes dx and dz; dweight (BF16 or F32 [D], undefined: frozen) accumulates. Statistics recomputed from x, z.
void gated_rms_norm_backward(const ColumnBlock& dy, const ColumnBlock& x, const ColumnBlock& z, const Tensor& weight,
                             int64_t group_size, double eps, const ColumnBlock& dx, const ColumnBlock& dz,
                             const Tensor& dweight);

}  // namespace moetune::ops::cuda
