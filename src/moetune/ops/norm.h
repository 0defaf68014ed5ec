// RMSNorm over the last dimension: y = x / sqrt(mean(x²) + eps) · weight, statistics in fp32.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);

}  // namespace moetune::ops
