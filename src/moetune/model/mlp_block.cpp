#include "moetune/model/mlp_block.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/activation.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

DenseMlpBlock::DenseMlpBlock(const ParameterStore& store, const std::string& prefix, const io::ModelConfig& config)
    : config_(config),
      norm_(store.get(prefix + "post_attn_norm")),
      gate_up_(store.get(prefix + "mlp.gate_up")),
      gate_up_bias_(store.find(prefix + "mlp.gate_up_bias")),
      down_(store.get(prefix + "mlp.down")),
      down_bias_(store.find(prefix + "mlp.down_bias")) {}

Tensor DenseMlpBlock::forward(const Tensor& h) {
  input_ = h;
  gate_up_out_ = ops::linear(ops::rms_norm(h, norm_.value, config_.rms_norm_eps), gate_up_.value, gate_up_bias_.value);
  return add(h, ops::linear(ops::swiglu(gate_up_out_), down_.value, down_bias_.value));
}

Tensor DenseMlpBlock::backward(const Tensor& dout) {
  Tensor dinner = ops::linear_backward(dout, ops::swiglu(gate_up_out_), down_.value, down_.grad, down_bias_.grad);
  const Tensor normed = ops::rms_norm(input_, norm_.value, config_.rms_norm_eps);
  Tensor dnormed = ops::linear_backward(ops::swiglu_backward(dinner, gate_up_out_), normed, gate_up_.value, gate_up_.grad,
                                        gate_up_bias_.grad);
  return add(dout, ops::rms_norm_backward(dnormed, input_, norm_.value, config_.rms_norm_eps, norm_.grad));
}

size_t DenseMlpBlock::stash_bytes() const { return held_bytes({&input_, &gate_up_out_}); }

}  // namespace moetune::model
