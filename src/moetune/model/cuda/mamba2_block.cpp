#include "moetune/model/cuda/mamba2_block.h"

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"
#include "moetune/model/lora_refusal.h"
#include "moetune/model/mamba2_params.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }
}  // namespace

Mamba2Block::Mamba2Block(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                         double norm_eps)
    : spec_(*sublayer.mamba2()), eps_(norm_eps), norm_(store.get(layer + sublayer.norm)) {
  const Mamba2Params p = Mamba2Params::lookup(store, layer);
  MOETUNE_CHECK(spec_.proj_bias == p.in_proj_bias.defined() && spec_.conv_bias == p.conv_bias.defined(),
                "{}: the spec and the parameters disagree on the Mamba2 biases", layer);
  refuse_lora_on(store, layer, {"mamba.in_proj", "mamba.out_proj"}, "Mamba2 projections", "in_proj / out_proj");
  weights_ = p.values();
  grads_ = p.gradients();
}

Tensor Mamba2Block::normed_input(const Tensor& h, const Mamba2GpuRows& rows) const {
  Tensor normed = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, norm_.value, eps_, normed);
  if (rows.valid.defined()) ops::cuda::mask_padding_rows(normed, rows.valid, normed);
  return normed;
}

Tensor Mamba2Block::forward(const Tensor& h, const StepContext& context) {
  MOETUNE_CHECK(!context.kv_cache, "generation with Mamba2 layers (Nemotron-H) does not run on the GPU yet: use --device cpu");
  const PhaseScope phase("mamba2");
  const Mamba2GpuRows& rows = context.batch.mamba2_rows();
  input_ = h;
  // Padding rows are zeroed here already, so the mixer keeps the normed tensor itself as its input.
  Tensor out = mamba2_mixer_forward_gpu(spec_, spec_.chunk_size, weights_, normed_input(h, rows), rows, &stash_);
  stash_.input = Tensor();  // recomputed in the backward pass: one [T, H] less held per layer
  ops::cuda::add(out, h, out);
  return out;
}

Tensor Mamba2Block::backward(const Tensor& dout, const StepContext& context) {
  const PhaseScope phase("mamba2.bwd");
  const Mamba2GpuRows& rows = context.batch.mamba2_rows();
  stash_.input = normed_input(input_, rows);
  const Tensor dnormed = mamba2_mixer_backward_gpu(spec_, spec_.chunk_size, weights_, dout, stash_, rows, grads_);
  Tensor dh = device_like(input_.shape());
  ops::cuda::rms_norm_backward(dnormed, input_, norm_.value, eps_, dh, norm_.grad, dout);
  clear_stash();
  return dh;
}

size_t Mamba2Block::stash_bytes() const {
  return held_bytes({&input_, &stash_.input, &stash_.projected, &stash_.conv, &stash_.scan});
}

}  // namespace moetune::model::cuda
