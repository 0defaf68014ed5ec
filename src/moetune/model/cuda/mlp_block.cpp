#include "moetune/model/cuda/mlp_block.h"

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"
#include "moetune/model/cuda/norm_for_backward.h"
#include "moetune/model/cuda/swiglu_mlp.h"
#include "moetune/model/recompute.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }
}  // namespace

DenseMlpBlock::DenseMlpBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                             double norm_eps)
    : spec_(*sublayer.mlp()), eps_(norm_eps), p_(MlpParams::lookup(store, layer, sublayer.norm)), lora_(SwigluLora::lookup(store, layer + "mlp.")) {}

Tensor DenseMlpBlock::forward(const Tensor& h, const StepContext& context) {
  const PhaseScope phase("mlp");
  input_ = h;
  lora_.pass = context.lora_pass();
  normed_ = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, p_.norm.value, eps_, normed_);
  Tensor out = device_like(h.shape());
  gate_up_out_ = swiglu_mlp(normed_, p_.mlp, out, &lora_, spec_, /*residual=*/h,
                            keeps_activation(spec_, context.keep_outputs) ? &activation_ : nullptr);
  if (!context.keep_outputs) normed_ = Tensor();
  return out;
}

Tensor DenseMlpBlock::backward(const Tensor& dout, const StepContext& context) {
  const PhaseScope phase("mlp.bwd");
  const Tensor normed = norm_for_backward(normed_, input_, p_.norm.value, eps_, input_.shape());
  Tensor dnormed = device_like(input_.shape());
  swiglu_mlp_backward(dout, normed, gate_up_out_, p_.mlp, dnormed, /*accumulate_dx=*/false, &lora_, spec_,
                      context.overwrite_gradients, activation_);
  Tensor dh = device_like(input_.shape());
  ops::cuda::rms_norm_backward(dnormed, input_, p_.norm.value, eps_, dh, p_.norm.grad, dout);
  clear_stash();
  return dh;
}

std::vector<Tensor> DenseMlpBlock::overwritten_gradients() const {
  std::vector<Tensor> grads;
  add_swiglu_weight_grads(p_.mlp, grads);
  return grads;
}

size_t DenseMlpBlock::stash_bytes() const {
  return held_bytes({&input_, &normed_, &gate_up_out_, &activation_}) + lora_.stash_bytes();
}

}  // namespace moetune::model::cuda
