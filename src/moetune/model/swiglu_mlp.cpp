#include "moetune/model/swiglu_mlp.h"

#include "moetune/ops/activation.h"
#include "moetune/ops/linear.h"

namespace moetune::model {

SwigluOutput swiglu_mlp(const Tensor& x, const SwigluParams& p) {
  SwigluOutput result;
  result.gate_up = ops::linear_forward(x, p.gate_up.value, p.gate_up_bias.value);
  result.out = ops::linear_forward(ops::swiglu_forward(result.gate_up), p.down.value, p.down_bias.value);
  return result;
}

Tensor swiglu_mlp_backward(const Tensor& dout, const Tensor& x, const Tensor& gate_up, const SwigluParams& p) {
  Tensor dinner = ops::linear_backward(dout, ops::swiglu_forward(gate_up), p.down.value, p.down.grad, p.down_bias.grad);
  return ops::linear_backward(ops::swiglu_backward(dinner, gate_up), x, p.gate_up.value, p.gate_up.grad, p.gate_up_bias.grad);
}

}  // namespace moetune::model
