#include "moetune/model/mamba2_block.h"

#include "moetune/core/error.h"
#include "moetune/model/block_util.h"
#include "moetune/model/lora_refusal.h"
#include "moetune/model/mamba2_params.h"
#include "moetune/ops/norm.h"

namespace moetune::model {

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

Tensor Mamba2Block::forward(const Tensor& h, const StepContext& context) {
  const Tensor normed = ops::rms_norm_forward(h, norm_.value, eps_);
  if (context.kv_cache) {
    // A cached decode step: the recurrence runs again over the sequence's inputs so far (one document, no
    // padding), O(sequence) per token like the attention beside it; the new tokens' rows are the last ones.
    const Tensor inputs = context.kv_cache->append_inputs(normed);
    const int64_t total = inputs.size(0), fresh = h.size(0);
    ops::DocumentStarts starts(size_t(total), 0);
    starts[0] = 1;
    const Tensor out = mamba2_mixer_forward(spec_, weights_, inputs, {starts, {}}, nullptr);
    return add(h, out.narrow(total - fresh, fresh));
  }
  input_ = h;
  return add(h, mamba2_mixer_forward(spec_, weights_, normed, mamba2_rows(context.layout), &stash_));
}

Tensor Mamba2Block::backward(const Tensor& dout, const StepContext& context) {
  const Tensor dnormed = mamba2_mixer_backward(spec_, weights_, dout, stash_, mamba2_rows(context.layout), grads_);
  return add(dout, ops::rms_norm_backward(dnormed, input_, norm_.value, eps_, norm_.grad));
}

size_t Mamba2Block::stash_bytes() const {
  return held_bytes({&input_, &stash_.input, &stash_.projected, &stash_.conv, &stash_.scan});
}

}  // namespace moetune::model
