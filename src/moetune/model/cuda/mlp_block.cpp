#include "moetune/model/cuda/mlp_block.h"

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"
#include "moetune/model/cuda/swiglu_mlp.h"
#include "moetune/model/recompute.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }
}  // namespace

DenseMlpBlock::DenseMlpBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                             double norm_eps)
    : spec_(*sublayer.mlp()),
      eps_(norm_eps),
      norm_offset_(sublayer.norm_weight_offset),
      p_(MlpParams::lookup(store, layer, sublayer.norm)),
      lora_(SwigluLora::lookup(store, layer + "mlp.")),
      out_norm_(sublayer_norm(store, layer, sublayer.out_norm), norm_eps, sublayer.norm_weight_offset,
                sublayer.residual_scale) {}

Tensor DenseMlpBlock::forward(const Tensor& h, const StepContext& context) {
  const PhaseScope phase("mlp");
  input_ = h;
  lora_.pass = context.lora_pass();
  normed_ = cuda::input_norm_forward(h, p_.norm, eps_, norm_offset_);
  Tensor out = device_like(h.shape());
  // Without an output norm the residual rides down's GEMM; with one, down writes the MLP's output alone.
  const Tensor mixed = out_norm_.defined() ? device_like(h.shape()) : out;
  gate_up_out_ = swiglu_mlp(normed_, p_.mlp, mixed, &lora_, spec_, /*residual=*/out_norm_.defined() ? Tensor() : h,
                            keeps_activation(spec_, context.keep_outputs) ? &activation_ : nullptr);
  if (out_norm_.defined()) out_norm_.forward(mixed, h, out, /*keep=*/!context.kv_cache);
  if (!context.keep_outputs || !p_.norm.defined()) normed_ = Tensor();
  return out;
}

Tensor DenseMlpBlock::backward(const Tensor& dout, const StepContext& context) {
  const PhaseScope phase("mlp.bwd");
  const Tensor normed = cuda::input_norm_for_backward(normed_, input_, p_.norm, eps_, norm_offset_);
  Tensor dnormed = device_like(input_.shape());
  swiglu_mlp_backward(out_norm_.backward(dout), normed, gate_up_out_, p_.mlp, dnormed, /*accumulate_dx=*/false, &lora_,
                      spec_, context.overwrite_gradients, activation_);
  Tensor dh = device_like(input_.shape());
  cuda::input_norm_backward(dnormed, input_, p_.norm, eps_, dh, dout, norm_offset_);
  clear_stash();
  return dh;
}

std::vector<Tensor> DenseMlpBlock::overwritten_gradients() const {
  std::vector<Tensor> grads;
  add_swiglu_weight_grads(p_.mlp, grads);
  return grads;
}

size_t DenseMlpBlock::stash_bytes() const {
  return held_bytes({&input_, &normed_, &gate_up_out_, &activation_}) + lora_.stash_bytes() + out_norm_.stash_bytes();
}

}  // namespace moetune::model::cuda
