// GPT-OSS's expert biases on the GPU, around the grouped GEMMs (grouped_gemm.h): rows in expert-major order, group e
// owning rows [offsets[e], offsets[e+1]) (offsets: device I32 [E+1], read on the device only). The bias is added
// after the GEMM (the GEMM writes bf16, then y += bias[e]; transformers adds it to the bf16 matmul output the same
// way) and its gradient is the per-group column sum of dy.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// y BF16 [R, N] += bias[e] on each row of group e; bias BF16 or F32 [E, N]. Rows past offsets[E] are untouched.
void expert_bias_add(const Tensor& y, const Tensor& bias, const Tensor& offsets);

// dbias[e] += Σ over group e's rows of dy (BF16 [R, N]); dbias BF16 or F32 [E, N]. Summed in fp32 in a fixed
// order (deterministic).
void expert_bias_grad(const Tensor& dy, const Tensor& offsets, const Tensor& dbias);

}  // namespace moetune::ops::cuda
