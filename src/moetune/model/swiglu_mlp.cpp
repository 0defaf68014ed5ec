#include "moetune/model/swiglu_mlp.h"

#include "moetune/ops/activation.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/relu_squared.h"

namespace moetune::model {
namespace {

Tensor activate(const Tensor& pre, const MlpSpec& mlp) {
  return mlp.activation == Activation::ReluSquared ? ops::relu_squared_forward(pre) : ops::gated_forward(pre, mlp.gate);
}

Tensor activate_backward(const Tensor& dinner, const Tensor& pre, const MlpSpec& mlp) {
  return mlp.activation == Activation::ReluSquared ? ops::relu_squared_backward(dinner, pre)
                                                   : ops::gated_backward(dinner, pre, mlp.gate);
}

}  // namespace

SwigluOutput swiglu_mlp(const Tensor& x, const SwigluParams& p, SwigluLora* lora, const MlpSpec& mlp) {
  SwigluOutput result;
  result.gate_up = ops::linear_forward(x, p.gate_up.value, p.gate_up_bias.value);
  if (lora) lora->gate_up.forward(x, result.gate_up, lora->training, lora->draw);
  const Tensor inner = activate(result.gate_up, mlp);
  result.out = ops::linear_forward(inner, p.down.value, p.down_bias.value);
  if (lora) lora->down.forward(inner, result.out, lora->training, lora->draw);
  return result;
}

Tensor swiglu_mlp_backward(const Tensor& dout, const Tensor& x, const Tensor& gate_up, const SwigluParams& p,
                           SwigluLora* lora, const MlpSpec& mlp) {
  const Tensor inner = activate(gate_up, mlp);
  Tensor dinner = ops::linear_backward(dout, inner, p.down.value, p.down.grad, p.down_bias.grad);
  if (lora) lora->down.backward(dout, inner, dinner);
  const Tensor dgate_up = activate_backward(dinner, gate_up, mlp);
  Tensor dx = ops::linear_backward(dgate_up, x, p.gate_up.value, p.gate_up.grad, p.gate_up_bias.grad);
  if (lora) lora->gate_up.backward(dgate_up, x, dx);
  return dx;
}

}  // namespace moetune::model
