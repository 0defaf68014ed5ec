#include <algorithm>

#include "moetune/ops/activation.h"
#include "moetune/ops/experts.h"
#include "moetune/ops/linear.h"

namespace moetune::ops {
namespace {

void copy_rows(const Tensor& source, const Tensor& destination, int64_t first) {
  std::copy_n(source.data<float>(), source.numel(), destination.data<float>() + first * source.size(1));
}

}  // namespace

ExpertActivations expert_mlp(const Tensor& permuted, const std::vector<int64_t>& offsets, const Tensor& gate_up_weight,
                             const Tensor& down_weight) {
  const int64_t rows = permuted.size(0), hidden = permuted.size(1), experts = gate_up_weight.size(0);
  ExpertActivations a{Tensor::zeros({rows, gate_up_weight.size(1)}, DType::F32), Tensor::zeros({rows, hidden}, DType::F32)};
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t first = offsets[size_t(e)], count = offsets[size_t(e + 1)] - first;
    if (count == 0) continue;
    Tensor pre = linear_forward(permuted.narrow(first, count), gate_up_weight[e]);
    copy_rows(pre, a.gate_up, first);
    copy_rows(linear_forward(swiglu_forward(pre), down_weight[e]), a.out, first);
  }
  return a;
}

Tensor expert_mlp_backward(const Tensor& dout, const Tensor& permuted, const ExpertActivations& activations,
                           const std::vector<int64_t>& offsets, const Tensor& gate_up_weight, const Tensor& down_weight,
                           const Tensor& dgate_up_weight, const Tensor& ddown_weight) {
  Tensor dpermuted = Tensor::zeros(permuted.shape(), DType::F32);
  for (int64_t e = 0; e < gate_up_weight.size(0); ++e) {
    const int64_t first = offsets[size_t(e)], count = offsets[size_t(e + 1)] - first;
    if (count == 0) continue;
    const Tensor pre = activations.gate_up.narrow(first, count);
    // Undefined weight gradients: frozen experts.
    Tensor dinner = linear_backward(dout.narrow(first, count), swiglu_forward(pre), down_weight[e],
                                    ddown_weight.defined() ? ddown_weight[e] : Tensor());
    Tensor dx = linear_backward(swiglu_backward(dinner, pre), permuted.narrow(first, count), gate_up_weight[e],
                                dgate_up_weight.defined() ? dgate_up_weight[e] : Tensor());
    copy_rows(dx, dpermuted, first);
  }
  return dpermuted;
}

}  // namespace moetune::ops
