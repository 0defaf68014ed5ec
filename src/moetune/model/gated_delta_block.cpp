#include "moetune/model/gated_delta_block.h"

#include "moetune/model/block_util.h"
#include "moetune/model/kv_cache.h"
#include "moetune/model/sublayer_norm.h"

namespace moetune::model {

GatedDeltaBlock::GatedDeltaBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                                 double norm_eps)
    : w_(store, layer, sublayer, norm_eps),
      in_lora_(LoraLinear::lookup(store, layer + "delta.in_proj")),
      out_lora_(LoraLinear::lookup(store, layer + "delta.out_proj")) {}

GatedDeltaAdapters GatedDeltaBlock::adapters(const StepContext& context) {
  return {&in_lora_, &out_lora_, context.training, context.lora_draw};
}

Tensor GatedDeltaBlock::forward(const Tensor& h, const StepContext& context) {
  const Tensor normed = input_norm_forward(h, w_.norm, w_.eps, w_.norm_offset);
  if (context.kv_cache) {
    // A cached decode step (one sequence, no padding): the conv and the rule continue from this sublayer's state in
    // the cache, O(1) per token.
    const GatedDeltaSpec& spec = w_.spec;
    const auto [window, state] = context.kv_cache->recurrent_state(
        {spec.conv_kernel - 1, spec.conv_channels()}, {spec.num_v_heads, spec.k_head_dim, spec.v_head_dim});
    return add(h, gated_delta_mixer_step(spec, w_.values, normed, window, state, adapters(context)));
  }
  input_ = h;
  return add(h, gated_delta_mixer_forward(w_.spec, w_.values, normed, mamba2_rows(context.layout), &stash_,
                                          adapters(context)));
}

Tensor GatedDeltaBlock::backward(const Tensor& dout, const StepContext& context) {
  const Tensor dnormed = gated_delta_mixer_backward(w_.spec, w_.values, dout, stash_, mamba2_rows(context.layout),
                                                    w_.grads, adapters(context));
  return input_norm_backward(dnormed, input_, w_.norm, w_.eps, dout, w_.norm_offset);
}

size_t GatedDeltaBlock::stash_bytes() const {
  return held_bytes({&input_, &stash_.input, &stash_.projected, &stash_.conv, &stash_.core}) + in_lora_.stash_bytes() +
         out_lora_.stash_bytes();
}

}  // namespace moetune::model
