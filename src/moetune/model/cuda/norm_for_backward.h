// A GPU block's RMSNorm output in its backward pass: the tensor its forward pass kept (StepContext::
// keep_outputs), or else the norm run again on the kept input.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {

// `input`: a Tensor or an ops::cuda::ColumnBlock (ops/cuda/norm.h takes both); `shape`: the output's;
// weight_offset: the norm's (Gemma's 1 + weight).
template <class Input>
Tensor norm_for_backward(const Tensor& kept, const Input& input, const Tensor& weight, double eps, Shape shape,
                         float weight_offset = 0.0f) {
  if (kept.defined()) return kept;
  Tensor normed = Tensor::empty(std::move(shape), DType::BF16, Device::cuda());
  ops::cuda::rms_norm_forward(input, weight, eps, normed, weight_offset);
  return normed;
}

}  // namespace moetune::model::cuda
