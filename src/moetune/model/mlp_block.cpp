#include "moetune/model/mlp_block.h"

#include "moetune/model/block_util.h"
#include "moetune/model/swiglu_mlp.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

DenseMlpBlock::DenseMlpBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                             double norm_eps)
    : eps_(norm_eps),
      mlp_(*sublayer.mlp()),
      p_(MlpParams::lookup(store, layer, sublayer.norm)),
      lora_(SwigluLora::lookup(store, layer + "mlp.")) {}

Tensor DenseMlpBlock::forward(const Tensor& h, const StepContext& context) {
  input_ = h;
  lora_.training = context.training;
  lora_.draw = context.lora_draw;
  SwigluOutput mlp = swiglu_mlp(ops::rms_norm_forward(h, p_.norm.value, eps_), p_.mlp, &lora_, mlp_);
  gate_up_out_ = mlp.gate_up;
  return add(h, mlp.out);
}

Tensor DenseMlpBlock::backward(const Tensor& dout, const StepContext&) {
  const Tensor normed = ops::rms_norm_forward(input_, p_.norm.value, eps_);  // recomputed, not kept
  Tensor dnormed = swiglu_mlp_backward(dout, normed, gate_up_out_, p_.mlp, &lora_, mlp_);
  return add(dout, ops::rms_norm_backward(dnormed, input_, p_.norm.value, eps_, p_.norm.grad));
}

size_t DenseMlpBlock::stash_bytes() const { return held_bytes({&input_, &gate_up_out_}) + lora_.stash_bytes(); }

}  // namespace moetune::model
