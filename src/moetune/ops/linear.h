// Dense projections: y = x · Wᵀ (+ b), with W stored [out, in] as nn.Linear does.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

// x [T, in] f32, weight [out, in] (a view into a fused parameter is fine), bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace moetune::ops
