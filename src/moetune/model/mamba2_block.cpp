#include "moetune/model/mamba2_block.h"

#include "moetune/core/error.h"
#include "moetune/model/block_util.h"
#include "moetune/model/lora_refusal.h"
#include "moetune/ops/norm.h"

namespace moetune::model {
namespace {

// The mixer's parameters ("layers.N.mamba.*"); conv1d's [C, 1, K] (its HF shape, kept by the engine) read as [C, K].
struct Mamba2Params {
  Param in_proj, in_proj_bias, conv, conv_bias, dt_bias, a_log, d, norm, out_proj, out_proj_bias;

  static Mamba2Params lookup(const ParameterStore& store, const std::string& layer) {
    const std::string m = layer + "mamba.";
    return {store.get(m + "in_proj"), store.find(m + "in_proj_bias"), store.get(m + "conv"), store.find(m + "conv_bias"),
            store.get(m + "dt_bias"), store.get(m + "a_log"),         store.get(m + "d"),    store.get(m + "norm"),
            store.get(m + "out_proj"), store.find(m + "out_proj_bias")};
  }
};

Tensor as_conv_matrix(const Tensor& conv) { return conv.defined() ? conv.view({conv.size(0), conv.size(2)}) : conv; }

Mamba2Weights values(const Mamba2Params& p) {
  return {p.in_proj.value, p.in_proj_bias.value, as_conv_matrix(p.conv.value), p.conv_bias.value, p.dt_bias.value,
          p.a_log.value,   p.d.value,            p.norm.value,                   p.out_proj.value,  p.out_proj_bias.value};
}

Mamba2Weights gradients(const Mamba2Params& p) {
  return {p.in_proj.grad, p.in_proj_bias.grad, as_conv_matrix(p.conv.grad), p.conv_bias.grad, p.dt_bias.grad,
          p.a_log.grad,   p.d.grad,            p.norm.grad,                  p.out_proj.grad,  p.out_proj_bias.grad};
}

}  // namespace

Mamba2Block::Mamba2Block(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                         double norm_eps)
    : spec_(*sublayer.mamba2()), eps_(norm_eps), norm_(store.get(layer + sublayer.norm)) {
  const Mamba2Params p = Mamba2Params::lookup(store, layer);
  MOETUNE_CHECK(spec_.proj_bias == p.in_proj_bias.defined() && spec_.conv_bias == p.conv_bias.defined(),
                "{}: the spec and the parameters disagree on the Mamba2 biases", layer);
  refuse_lora_on(store, layer, {"mamba.in_proj", "mamba.out_proj"}, "Mamba2 projections", "in_proj / out_proj");
  weights_ = values(p);
  grads_ = gradients(p);
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
