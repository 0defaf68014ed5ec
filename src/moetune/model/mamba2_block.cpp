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
    // A cached decode step: the recurrence runs again over the sequence's inputs so far (one document, no
    // padding), O(sequence) per token like the attention beside it; the new tokens' rows are the last ones.
    const Tensor inputs = context.kv_cache->append_inputs(normed);
    const int64_t total = inputs.size(0), fresh = h.size(0);
    ops::DocumentStarts starts(size_t(total), 0);
    starts[0] = 1;
    const Tensor out = mamba2_mixer_forward(w_.spec, w_.values, inputs, {starts, {}}, nullptr);
    return add(h, out.narrow(total - fresh, fresh));
  }
  input_ = h;
  return add(h, mamba2_mixer_forward(w_.spec, w_.values, normed, mamba2_rows(context.layout), &stash_));
}

Tensor Mamba2Block::backward(const Tensor& dout, const StepContext& context) {
  const Tensor dnormed = mamba2_mixer_backward(w_.spec, w_.values, dout, stash_, mamba2_rows(context.layout), w_.grads);
  return add(dout, ops::rms_norm_backward(dnormed, input_, w_.norm.value, w_.eps, w_.norm.grad));
}

size_t Mamba2Block::stash_bytes() const {
  return held_bytes({&input_, &stash_.input, &stash_.projected, &stash_.conv, &stash_.scan});
}

}  // namespace moetune::model
