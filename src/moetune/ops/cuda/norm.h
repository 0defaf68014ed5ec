// RMSNorm on the GPU (ops/norm.h semantics): BF16 rows, fp32 statistics, deterministic weight gradient.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"

namespace moetune::ops::cuda {

// y = x / sqrt(mean(x²) + eps) ⊙ (weight_offset + weight) over the last dim: x, y BF16 [..., W] (same shape),
// weight BF16 [W] (the offset: Gemma's 1, added in fp32; 0 elsewhere). y may be x itself.
void rms_norm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y, float weight_offset = 0.0f);

// dx = residual + d(norm)/dx, with residual undefined (no add) or any BF16 tensor of x's shape, dx itself
// included; dx may also be dy itself. dweight (BF16 or F32 [W]; undefined for a frozen weight) += Σ_rows dy ⊙ x̂, summed in fp32 and added
// once per element. The statistics are recomputed from x.
void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, double eps, const Tensor& dx,
                       const Tensor& dweight, const Tensor& residual = {}, float weight_offset = 0.0f);

// The same where x (and dx) is a block of columns of a wider BF16 matrix [T, *], read (written) in place: MLA's
// kv_a output holds the latent the norm reads beside the rope key, and one GEMM gives both. y and dy: [T, W].
void rms_norm_forward(const ColumnBlock& x, const Tensor& weight, double eps, const Tensor& y,
                      float weight_offset = 0.0f);
void rms_norm_backward(const Tensor& dy, const ColumnBlock& x, const Tensor& weight, double eps, const ColumnBlock& dx,
                       const Tensor& dweight, float weight_offset = 0.0f);

}  // namespace moetune::ops::cuda
