#include "moetune/model/cuda/gated_delta_block.h"

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"
#include "moetune/model/cuda/kv_cache.h"
#include "moetune/model/cuda/sublayer_norm.h"
#include "moetune/ops/cuda/elementwise.h"

namespace moetune::model::cuda {

GatedDeltaBlock::GatedDeltaBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                                 double norm_eps)
    : w_(store, layer, sublayer, norm_eps),
      in_lora_(LoraLinear::lookup(store, layer + "delta.in_proj")),
      out_lora_(LoraLinear::lookup(store, layer + "delta.out_proj")) {}

Tensor GatedDeltaBlock::forward(const Tensor& h, const StepContext& context) {
  const PhaseScope phase("gated_delta");
  if (context.kv_cache) {
    // Generation: the conv and the rule continue from the cache's state for this sublayer (one sequence, no
    // padding: the rows are the new tokens).
    const GatedDeltaSpec& spec = w_.spec;
    const auto [window, state] = context.kv_cache->next_recurrent_layer(
        {spec.conv_kernel - 1, spec.conv_channels()}, {spec.num_v_heads, spec.k_head_dim, spec.v_head_dim});
    const Tensor normed = cuda::input_norm_forward(h, w_.norm, w_.eps, w_.norm_offset);
    Tensor out = gated_delta_mixer_step_gpu(spec, w_.values, normed, window, state, adapters(context));
    ops::cuda::add(h, out, out);
    return out;
  }
  const Mamba2GpuRows& rows = context.batch.mamba2_rows();
  input_ = h;
  // Padding rows are zeroed here already, so the mixer keeps the normed tensor itself as its input.
  Tensor out = gated_delta_mixer_forward_gpu(w_.spec, w_.values,
                                             masked_input_norm_forward(h, w_.norm, w_.eps, w_.norm_offset, rows.valid),
                                             rows, &stash_, adapters(context));
  stash_.input = Tensor();  // recomputed in the backward pass: one [T, H] less held per layer
  ops::cuda::add(h, out, out);
  return out;
}

Tensor GatedDeltaBlock::backward(const Tensor& dout, const StepContext& context) {
  const PhaseScope phase("gated_delta.bwd");
  const Mamba2GpuRows& rows = context.batch.mamba2_rows();
  stash_.input = masked_input_norm_forward(input_, w_.norm, w_.eps, w_.norm_offset, rows.valid);
  const Tensor dnormed =
      gated_delta_mixer_backward_gpu(w_.spec, w_.values, dout, stash_, rows, w_.grads, adapters(context));
  Tensor dh = Tensor::empty(input_.shape(), DType::BF16, Device::cuda());
  cuda::input_norm_backward(dnormed, input_, w_.norm, w_.eps, dh, dout, w_.norm_offset);
  clear_stash();
  return dh;
}

size_t GatedDeltaBlock::stash_bytes() const {
  return held_bytes({&input_, &stash_.input, &stash_.projected, &stash_.conv, &stash_.core}) + in_lora_.stash_bytes() +
         out_lora_.stash_bytes();
}

}  // namespace moetune::model::cuda
