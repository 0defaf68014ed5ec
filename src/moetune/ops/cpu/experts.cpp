#include <algorithm>

#include "moetune/ops/activation.h"
#include "moetune/ops/experts.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/relu_squared.h"

namespace moetune::ops {
namespace {

void copy_rows(const Tensor& source, const Tensor& destination, int64_t first) {
  std::copy_n(source.data<float>(), source.numel(), destination.data<float>() + first * source.size(1));
}

}  // namespace

Tensor expert_slice(const Tensor& t, int64_t e) { return t.defined() ? t[e] : Tensor(); }

Tensor expert_activation(const Tensor& pre, const ExpertVariant& variant) {
  if (variant.relu_squared) return relu_squared_forward(pre);
  return variant.clamp ? clamped_swiglu_forward(pre, *variant.clamp) : gated_forward(pre, variant.gate);
}

Tensor expert_activation_backward(const Tensor& dinner, const Tensor& pre, const ExpertVariant& variant) {
  if (variant.relu_squared) return relu_squared_backward(dinner, pre);
  return variant.clamp ? clamped_swiglu_backward(dinner, pre, *variant.clamp)
                       : gated_backward(dinner, pre, variant.gate);
}

ExpertActivations expert_mlp(const Tensor& permuted, const std::vector<int64_t>& offsets, const Tensor& gate_up_weight,
                             const Tensor& down_weight, const ExpertVariant& variant) {
  const int64_t rows = permuted.size(0), hidden = permuted.size(1), experts = gate_up_weight.size(0);
  ExpertActivations a{Tensor::zeros({rows, gate_up_weight.size(1)}, DType::F32), Tensor::zeros({rows, hidden}, DType::F32)};
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[size_t(e)], count = offsets[size_t(e + 1)] - first;
    if (count == 0) continue;
    Tensor pre = linear_forward(permuted.narrow(first, count), gate_up_weight[e], expert_slice(variant.gate_up_bias, e));
    copy_rows(pre, a.gate_up, first);
    copy_rows(linear_forward(expert_activation(pre, variant), down_weight[e], expert_slice(variant.down_bias, e)),
              a.out, first);
  }
  return a;
}

Tensor expert_mlp_backward(const Tensor& dout, const Tensor& permuted, const ExpertActivations& activations,
                           const std::vector<int64_t>& offsets, const Tensor& gate_up_weight, const Tensor& down_weight,
                           const Tensor& dgate_up_weight, const Tensor& ddown_weight, const ExpertVariant& variant,
                           const ExpertBiasGrads& bias_grads) {
  Tensor dpermuted = Tensor::zeros(permuted.shape(), DType::F32);
  for (int64_t e = 0; e < gate_up_weight.size(0); ++e) {
    const int64_t first = offsets[size_t(e)], count = offsets[size_t(e + 1)] - first;
    if (count == 0) continue;
    const Tensor pre = activations.gate_up.narrow(first, count);
    // Undefined weight gradients: frozen experts.
    Tensor dinner = linear_backward(dout.narrow(first, count), expert_activation(pre, variant), down_weight[e],
                                    expert_slice(ddown_weight, e), expert_slice(bias_grads.down_bias, e));
    Tensor dx =
        linear_backward(expert_activation_backward(dinner, pre, variant), permuted.narrow(first, count),
                        gate_up_weight[e], expert_slice(dgate_up_weight, e), expert_slice(bias_grads.gate_up_bias, e));
    copy_rows(dx, dpermuted, first);
  }
  return dpermuted;
}

}  // namespace moetune::ops
