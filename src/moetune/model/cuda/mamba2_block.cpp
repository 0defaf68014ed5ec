#include "moetune/model/cuda/mamba2_block.h"

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"
#include "moetune/model/cuda/kv_cache.h"
#include "moetune/model/cuda/sublayer_norm.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/mamba2_conv.h"
#include "moetune/ops/cuda/norm.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }
}  // namespace

Mamba2Block::Mamba2Block(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                         double norm_eps)
    : w_(store, layer, sublayer, norm_eps) {}

Tensor Mamba2Block::forward(const Tensor& h, const StepContext& context) {
  const PhaseScope phase("mamba2");
  if (context.kv_cache) {
    // Generation: the conv and the scan continue from the cache's state for this sublayer (one sequence, no
    // padding: the rows are the new tokens).
    const Mamba2Spec& spec = w_.spec;
    const auto [window, state] = context.kv_cache->next_recurrent_layer(
        {spec.conv_kernel - 1, spec.conv_channels()}, {spec.num_heads, spec.head_dim, spec.state_size});
    Tensor normed = device_like(h.shape());
    ops::cuda::rms_norm_forward(h, w_.norm.value, w_.eps, normed);
    Tensor out = mamba2_mixer_step_gpu(spec, w_.values, normed, window, state);
    ops::cuda::add(h, out, out, float(w_.residual_scale));
    return out;
  }
  const Mamba2GpuRows& rows = context.batch.mamba2_rows();
  input_ = h;
  // Padding rows are zeroed here already, so the mixer keeps the normed tensor itself as its input.
  Tensor out = mamba2_mixer_forward_gpu(w_.spec, w_.spec.chunk_size, w_.values,
                                        masked_input_norm_forward(h, w_.norm, w_.eps, 0.0f, rows.valid), rows, &stash_);
  stash_.input = Tensor();  // recomputed in the backward pass: one [T, H] less held per layer
  ops::cuda::add(h, out, out, float(w_.residual_scale));  // h + s · mixer (Granite's residual multiplier)
  return out;
}

Tensor Mamba2Block::backward(const Tensor& dout, const StepContext& context) {
  const PhaseScope phase("mamba2.bwd");
  const Mamba2GpuRows& rows = context.batch.mamba2_rows();
  stash_.input = masked_input_norm_forward(input_, w_.norm, w_.eps, 0.0f, rows.valid);
  Tensor dmixed = dout;
  if (w_.residual_scale != 1.0) {
    dmixed = device_like(dout.shape());
    ops::cuda::scale(dout, float(w_.residual_scale), dmixed);
  }
  const Tensor dnormed =
      mamba2_mixer_backward_gpu(w_.spec, w_.spec.chunk_size, w_.values, dmixed, stash_, rows, w_.grads);
  Tensor dh = device_like(input_.shape());
  ops::cuda::rms_norm_backward(dnormed, input_, w_.norm.value, w_.eps, dh, w_.norm.grad, dout);
  clear_stash();
  return dh;
}

size_t Mamba2Block::stash_bytes() const {
  return held_bytes({&input_, &stash_.input, &stash_.projected, &stash_.conv, &stash_.scan});
}

}  // namespace moetune::model::cuda
