#include "moetune/model/mlp_block.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/activation.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

DenseMlpBlock::DenseMlpBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config)
    : config_(config), p_(MlpParams::lookup(store, prefix)) {}

Tensor DenseMlpBlock::forward(const Tensor& h) {
  input_ = h;
  gate_up_out_ = ops::linear(ops::rms_norm(h, p_.norm.value, config_.rms_norm_eps), p_.gate_up.value, p_.gate_up_bias.value);
  return add(h, ops::linear(ops::swiglu(gate_up_out_), p_.down.value, p_.down_bias.value));
}

Tensor DenseMlpBlock::backward(const Tensor& dout) {
  Tensor dinner = ops::linear_backward(dout, ops::swiglu(gate_up_out_), p_.down.value, p_.down.grad, p_.down_bias.grad);
  const Tensor normed = ops::rms_norm(input_, p_.norm.value, config_.rms_norm_eps);
  Tensor dnormed = ops::linear_backward(ops::swiglu_backward(dinner, gate_up_out_), normed, p_.gate_up.value, p_.gate_up.grad,
                                        p_.gate_up_bias.grad);
  return add(dout, ops::rms_norm_backward(dnormed, input_, p_.norm.value, config_.rms_norm_eps, p_.norm.grad));
}

size_t DenseMlpBlock::stash_bytes() const { return held_bytes({&input_, &gate_up_out_}); }

}  // namespace moetune::model
