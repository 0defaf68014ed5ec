// Elementwise sums on the GPU, BF16 or F32 storage with fp32 math.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// out = a + b_scale · b (fp32 math); a, b and out share one shape and one dtype (BF16 or F32). out may be a or b
// itself.
void add(const Tensor& a, const Tensor& b, const Tensor& out, float b_scale = 1.0f);
// out = factor · a (fp32 math), one shape and dtype; out may be a itself.
void scale(const Tensor& a, float factor, const Tensor& out);

}  // namespace moetune::ops::cuda
