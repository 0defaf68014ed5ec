#include "moetune/model/lora_experts.h"

#include "moetune/model/block_util.h"
#include "moetune/model/lora_weights.h"
#include "moetune/ops/activation.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/lora.h"

namespace moetune::model {
namespace {

// y = x W_eᵀ (+ b_e) for each expert's rows.
Tensor grouped_linear(const Tensor& x, const std::vector<int64_t>& offsets, const Tensor& weight, const Tensor& bias) {
  Tensor y = Tensor::zeros({x.size(0), weight.size(1)}, DType::F32);
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t first = offsets[e], count = offsets[e + 1] - first;
    if (count > 0)
      y.narrow(first, count)
          .copy_from(
              ops::linear_forward(x.narrow(first, count), weight[int64_t(e)], ops::expert_slice(bias, int64_t(e))));
  }
  return y;
}

// d(x) for y = x W_eᵀ + b_e per expert; the base weight is frozen (no weight gradient), the bias's gradient is
// accumulated where `dbias` is defined.
Tensor grouped_linear_backward(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets,
                               const Tensor& weight, const Tensor& dbias) {
  Tensor dx = Tensor::zeros(x.shape(), DType::F32);
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t first = offsets[e], count = offsets[e + 1] - first;
    if (count > 0)
      dx.narrow(first, count)
          .copy_from(ops::linear_backward(dy.narrow(first, count), x.narrow(first, count), weight[int64_t(e)], {},
                                          ops::expert_slice(dbias, int64_t(e))));
  }
  return dx;
}

}  // namespace

ExpertLoraParams ExpertLoraParams::lookup(const ParameterStore& store, const std::string& layer) {
  ExpertLoraParams p;
  if (!store.weights().lora) return p;
  const auto find = [&](const char* weight, const char* which) { return store.find(lora_parameter_name(layer + weight, which, 0)); };
  p.gate_up_a = find("moe.experts_gate_up", "lora_A");
  p.gate_up_b = find("moe.experts_gate_up", "lora_B");
  p.down_a = find("moe.experts_down", "lora_A");
  p.down_b = find("moe.experts_down", "lora_B");
  p.scale = store.weights().lora->scale();
  return p;
}

ExpertLora ExpertLora::lookup(const ParameterStore& store, const std::string& layer) {
  ExpertLora lora;
  lora.p_ = ExpertLoraParams::lookup(store, layer);
  return lora;
}

ops::ExpertActivations ExpertLora::forward(const Tensor& rows, const std::vector<int64_t>& offsets,
                                           const Param& gate_up, const Param& down, const ops::ExpertVariant& variant) {
  ops::ExpertActivations a;
  a.gate_up = grouped_linear(rows, offsets, gate_up.value, variant.gate_up_bias);
  if (p_.gate_up_a.defined()) gate_up_u_ = ops::lora_grouped_forward(rows, offsets, p_.gate_up_a.value, p_.gate_up_b.value, p_.scale, a.gate_up);
  const Tensor inner = ops::expert_activation(a.gate_up, variant);
  a.out = grouped_linear(inner, offsets, down.value, variant.down_bias);
  if (p_.down_a.defined()) down_u_ = ops::lora_grouped_forward(inner, offsets, p_.down_a.value, p_.down_b.value, p_.scale, a.out);
  return a;
}

Tensor ExpertLora::backward(const Tensor& dout, const Tensor& rows, const ops::ExpertActivations& activations,
                            const std::vector<int64_t>& offsets, const Param& gate_up, const Param& down,
                            const ops::ExpertVariant& variant, const ops::ExpertBiasGrads& bias_grads) {
  MOETUNE_CHECK(!gate_up.grad.defined() && !down.grad.defined(), "expert LoRA: the base expert weights must be frozen");
  const Tensor inner = ops::expert_activation(activations.gate_up, variant);  // recomputed, not kept
  Tensor dinner = grouped_linear_backward(dout, inner, offsets, down.value, bias_grads.down_bias);
  if (p_.down_a.defined())
    ops::lora_grouped_backward(dout, inner, down_u_, offsets, p_.down_a.value, p_.down_b.value, p_.scale, p_.down_a.grad, p_.down_b.grad, dinner);
  const Tensor dpre = ops::expert_activation_backward(dinner, activations.gate_up, variant);
  Tensor drows = grouped_linear_backward(dpre, rows, offsets, gate_up.value, bias_grads.gate_up_bias);
  if (p_.gate_up_a.defined())
    ops::lora_grouped_backward(dpre, rows, gate_up_u_, offsets, p_.gate_up_a.value, p_.gate_up_b.value, p_.scale, p_.gate_up_a.grad,
                               p_.gate_up_b.grad, drows);
  return drows;
}

size_t ExpertLora::stash_bytes() const { return held_bytes({&gate_up_u_, &down_u_}); }

}  // namespace moetune::model
