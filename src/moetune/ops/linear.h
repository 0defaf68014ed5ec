// Dense projections: y = x · Wᵀ (+ b), with W stored [out, in] as nn.Linear does.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

// x [T, in] f32, weight [out, in] (a view into a fused parameter is fine), bias [out] or undefined.
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// Given dy [T, out]: accumulates dW += dyᵀ·x into `dweight` (same shape as weight, a view into a fused
// gradient is fine; undefined for a frozen weight) and db += Σ_rows dy into `dbias` when defined; returns
// dx = dy·W [T, in].
Tensor linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dweight,
                       const Tensor& dbias = {});

}  // namespace moetune::ops
