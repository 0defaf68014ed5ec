// The gated RMSNorm of the Mamba2 mixer and the Gated DeltaNet on the GPU (ops/mamba2.h semantics, the gate before or
// after the norm): BF16 rows read in place through ColumnBlocks, fp32 statistics per group of `group_size` columns, a
// deterministic weight gradient. The weight is [D], or [group_size] shared by every group (Qwen3-Next's, one value
// head's).
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops::cuda {

// y = weight ⊙ rms_norm_per_group(x ⊙ silu(z)) (BeforeNorm) or weight ⊙ rms_norm_per_group(x) ⊙ silu(z)
// (AfterNorm); x, z, y [N, D], weight [D] or [group_size] BF16.
void gated_rms_norm_forward(const ColumnBlock& x, const ColumnBlock& z, const Tensor& weight, int64_t group_size,
                            double eps, const ColumnBlock& y, GatePlacement placement = GatePlacement::BeforeNorm);

// Writes dx and dz; dweight (BF16 or F32 [D], undefined: frozen) accumulates. Statistics recomputed from x, z.
void gated_rms_norm_backward(const ColumnBlock& dy, const ColumnBlock& x, const ColumnBlock& z, const Tensor& weight,
                             int64_t group_size, double eps, const ColumnBlock& dx, const ColumnBlock& dz,
                             const Tensor& dweight, GatePlacement placement = GatePlacement::BeforeNorm);

}  // namespace moetune::ops::cuda
