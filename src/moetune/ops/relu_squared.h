// relu², Nemotron-H's MLP and expert activation (ACT2FN["relu2"]: relu(x)²), applied to the up projection
// alone: these MLPs have no gate.
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops {

Tensor relu_squared_forward(const Tensor& x);
// Given d(out): d(x) = d(out) · 2·relu(x).
Tensor relu_squared_backward(const Tensor& dout, const Tensor& x);

}  // namespace moetune::ops
