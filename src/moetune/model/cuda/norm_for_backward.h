// A GPU block's RMSNorm output in its backward pass: the tensor its forward pass kept (StepContext::
// keep_outputs), or else the norm run again on the kept input.
#pragma once

#include <type_traits>

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {

// `input`: a Tensor or an ops::cuda::ColumnBlock (ops/cuda/norm.h takes both); `shape`: the output's.
// weight_offset: the norm's (Gemma's 1 + weight; Tensor inputs only).
template <class Input>
Tensor norm_for_backward(const Tensor& kept, const Input& input, const Tensor& weight, double eps, Shape shape,
                         float weight_offset = 0.0f) {
  if (kept.defined()) return kept;
  Tensor normed = Tensor::empty(std::move(shape), DType::BF16, Device::cuda());
  if constexpr (std::is_same_v<Input, Tensor>)
    ops::cuda::rms_norm_forward(input, weight, eps, normed, weight_offset);
  else if (weight_offset == 0.0f)  // column blocks (MLA's latents) have no offset form
    ops::cuda::rms_norm_forward(input, weight, eps, normed);
  else
    throw Error("norm_for_backward: a weight offset on a column block is not implemented");
  return normed;
}

}  // namespace moetune::model::cuda
