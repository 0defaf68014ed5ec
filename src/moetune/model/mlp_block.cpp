#include "moetune/model/mlp_block.h"

#include "moetune/model/block_util.h"
#include "moetune/model/swiglu_mlp.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

DenseMlpBlock::DenseMlpBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                             double norm_eps)
    : eps_(norm_eps),
      norm_offset_(sublayer.norm_weight_offset),
      mlp_(*sublayer.mlp()),
      p_(MlpParams::lookup(store, layer, sublayer.norm)),
      lora_(SwigluLora::lookup(store, layer + "mlp.")),
      out_norm_(sublayer_norm(store, layer, sublayer.out_norm), norm_eps, sublayer.norm_weight_offset,
                sublayer.residual_scale) {}

Tensor DenseMlpBlock::forward(const Tensor& h, const StepContext& context) {
  input_ = h;
  lora_.training = context.training;
  lora_.draw = context.lora_draw;
  SwigluOutput mlp = swiglu_mlp(input_norm_forward(h, p_.norm, eps_, norm_offset_), p_.mlp, &lora_, mlp_);
  gate_up_out_ = mlp.gate_up;
  return out_norm_.forward(mlp.out, h);
}

Tensor DenseMlpBlock::backward(const Tensor& dout, const StepContext&) {
  const Tensor normed = input_norm_forward(input_, p_.norm, eps_, norm_offset_);  // recomputed, not kept
  Tensor dnormed = swiglu_mlp_backward(out_norm_.backward(dout), normed, gate_up_out_, p_.mlp, &lora_, mlp_);
  return input_norm_backward(dnormed, input_, p_.norm, eps_, dout, norm_offset_);
}

size_t DenseMlpBlock::stash_bytes() const {
  return held_bytes({&input_, &gate_up_out_}) + lora_.stash_bytes() + out_norm_.stash_bytes();
}

}  // namespace moetune::model
