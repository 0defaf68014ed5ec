#include "moetune/model/mamba2_block.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

Mamba2Block::Mamba2Block(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                         double norm_eps)
    : w_(store, layer, sublayer, norm_eps) {}

Tensor Mamba2Block::forward(const Tensor& h, const StepContext& context) {
  const Tensor normed = ops::rms_norm_forward(h, w_.norm.value, w_.eps);
  if (context.kv_cache) {
    // A cached decode step (one sequence, no padding): the conv and the scan continue from this sublayer's state
    // in the cache, O(1) per token.
    const Mamba2Spec& spec = w_.spec;
    const auto [window, state] = context.kv_cache->recurrent_state({spec.conv_kernel - 1, spec.conv_channels()},
                                                                   {spec.num_heads, spec.head_dim, spec.state_size});
    return residual_add(h, mamba2_mixer_step(spec, w_.values, normed, window, state));
  }
  input_ = h;
  return residual_add(h, mamba2_mixer_forward(w_.spec, w_.values, normed, mamba2_rows(context.layout), &stash_));
}

Tensor Mamba2Block::residual_add(const Tensor& h, const Tensor& mixed) const {
  return add(h, w_.residual_scale != 1.0 ? scaled(mixed, w_.residual_scale) : mixed);
}

Tensor Mamba2Block::backward(const Tensor& dout, const StepContext& context) {
  const Tensor dmixed = w_.residual_scale != 1.0 ? scaled(dout, w_.residual_scale) : dout;
  const Tensor dnormed =
      mamba2_mixer_backward(w_.spec, w_.values, dmixed, stash_, mamba2_rows(context.layout), w_.grads);
  return add(dout, ops::rms_norm_backward(dnormed, input_, w_.norm.value, w_.eps, w_.norm.grad));
}

size_t Mamba2Block::stash_bytes() const {
  return held_bytes({&input_, &stash_.input, &stash_.projected, &stash_.conv, &stash_.scan});
}

}  // namespace moetune::model
