#include "moetune/model/attention_block.h"

#include "moetune/model/block_util.h"
#include "moetune/ops/gate.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/norm.h"
#include "moetune/ops/rope.h"

namespace moetune::model {
namespace {

// GPT-OSS's sliding window and sinks, when the layer has them.
ops::AttentionVariant attention_variant(const AttentionSpec& spec, const AttentionParams& p) {
  return {spec.sliding_window, p.sinks.value};
}

}  // namespace

AttentionBlock::AttentionBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                               double norm_eps)
    : spec_(*sublayer.attention()),
      eps_(norm_eps),
      norm_offset_(sublayer.norm_weight_offset),
      inverse_frequencies_(spec_.rope,
                           [&](bool long_factors) {
                             return spec_.mla
                                        ? std::vector<float>{}
                                        : ops::rope_inverse_frequencies(spec_.rope, spec_.qk_head_dim, long_factors);
                           }),
      p_(spec_.mla ? AttentionParams{} : AttentionParams::lookup(store, layer, sublayer.norm)),
      // An MLA sublayer's adapters are its block's (MlaAttentionBlock::Adapters).
      qkv_lora_(spec_.mla ? LoraLinear() : LoraLinear::lookup(store, layer + "attn.qkv")),
      o_lora_(spec_.mla ? LoraLinear() : LoraLinear::lookup(store, layer + "attn.o")),
      out_norm_(sublayer_norm(store, layer, sublayer.out_norm), norm_eps, sublayer.norm_weight_offset,
                sublayer.residual_scale),
      mla_(spec_.mla ? std::make_unique<MlaAttentionBlock>(store, layer, sublayer, norm_eps) : nullptr) {
  if (mla_) return;
  MOETUNE_CHECK(spec_.qk_head_dim == spec_.v_head_dim, "{}: differing q/k and v head dims are not implemented", layer);
  MOETUNE_CHECK(spec_.sinks == p_.sinks.defined(), "{}: the spec and the parameters disagree on attention sinks", layer);
}

// Across heads, [T, heads, d] is normed as the [T, heads · d] rows transformers norms before it splits the heads.
Tensor AttentionBlock::qk_norm_forward(const Tensor& x, const Tensor& weight) const {
  if (!spec_.qk_norm_across_heads) return ops::rms_norm_forward(x, weight, eps_, norm_offset_);
  return ops::rms_norm_forward(x.view({x.size(0), -1}), weight, eps_, norm_offset_).view(x.shape());
}

Tensor AttentionBlock::qk_norm_backward(const Tensor& dy, const Tensor& x, const Param& norm) const {
  if (!spec_.qk_norm_across_heads) return ops::rms_norm_backward(dy, x, norm.value, eps_, norm.grad, norm_offset_);
  const Shape rows{x.size(0), -1};
  return ops::rms_norm_backward(dy.view(rows), x.view(rows), norm.value, eps_, norm.grad, norm_offset_).view(x.shape());
}

Tensor AttentionBlock::forward(const Tensor& h, const StepContext& context) {
  if (mla_) return mla_->forward(h, context);
  const SequenceLayout& layout = context.layout;
  const int64_t tokens = h.size(0), d = spec_.qk_head_dim, nq = spec_.num_heads, nkv = spec_.num_kv_heads;
  stash_.input = h;
  const Tensor normed = input_norm_forward(h, p_.norm, eps_, norm_offset_);
  Tensor qkv = ops::linear_forward(normed, p_.qkv.value, p_.qkv_bias.value);
  qkv_lora_.forward(normed, qkv, context.training, context.lora_draw);
  const int64_t gate_width = spec_.output_gate ? nq * d : 0;  // [q | gate | k | v]: the gate's columns after q's
  stash_.q_raw = columns(qkv, 0, nq * d).view({tokens, nq, d});
  if (spec_.output_gate) stash_.gate = columns(qkv, nq * d, gate_width);
  stash_.k_raw = columns(qkv, nq * d + gate_width, nkv * d).view({tokens, nkv, d});
  stash_.v = columns(qkv, nq * d + gate_width + nkv * d, nkv * d).view({tokens, nkv, d});
  stash_.q = p_.q_norm.defined() ? qk_norm_forward(stash_.q_raw, p_.q_norm.value) : stash_.q_raw.clone();
  stash_.k = p_.k_norm.defined() ? qk_norm_forward(stash_.k_raw, p_.k_norm.value) : stash_.k_raw.clone();
  if (!p_.q_norm.defined()) stash_.q_raw = stash_.k_raw = Tensor();  // only the norms read them back
  const double rope_scaling = ops::rope_attention_scaling(spec_.rope);
  const std::vector<float>& inverse_frequencies = inverse_frequencies_.for_positions(layout.positions);
  ops::apply_rope(stash_.q, inverse_frequencies, layout.positions, false, rope_scaling);
  ops::apply_rope(stash_.k, inverse_frequencies, layout.positions, false, rope_scaling);
  stash_.attended = attention_forward(stash_.q, stash_.k, stash_.v, layout.mask, spec_.softmax_scale(),
                                     attention_variant(spec_, p_), context.kv_cache);
  const Tensor attended = o_input();
  Tensor out = ops::linear_forward(attended, p_.o.value, p_.o_bias.value);
  o_lora_.forward(attended, out, context.training, context.lora_draw);
  return out_norm_.forward(out, h);
}

Tensor AttentionBlock::backward(const Tensor& dout, const StepContext& context) {
  if (mla_) return mla_->backward(dout, context);
  const SequenceLayout& layout = context.layout;
  const int64_t tokens = dout.size(0), d = spec_.qk_head_dim, nq = spec_.num_heads, nkv = spec_.num_kv_heads;
  const double scale = spec_.softmax_scale();
  const Tensor attended = o_input();
  const Tensor dmixed = out_norm_.backward(dout);
  Tensor dattended = ops::linear_backward(dmixed, attended, p_.o.value, p_.o.grad, p_.o_bias.grad);
  o_lora_.backward(dmixed, attended, dattended);
  Tensor dgate;
  if (spec_.output_gate) {  // through attended ⊙ sigmoid(gate)
    ops::SigmoidGateGrads gated = ops::sigmoid_gated_backward(dattended, stash_.attended, stash_.gate);
    dattended = gated.dy;
    dgate = gated.dlogits;
  }
  ops::AttentionGrads g = ops::causal_attention_backward(dattended.view({tokens, nq, d}), stash_.q, stash_.k, stash_.v,
                                                         stash_.attended, layout.mask, scale, attention_variant(spec_, p_));
  if (p_.sinks.grad.defined()) accumulate(p_.sinks.grad, g.dsinks);
  const double rope_scaling = ops::rope_attention_scaling(spec_.rope);
  const std::vector<float>& inverse_frequencies = inverse_frequencies_.for_positions(layout.positions);
  ops::apply_rope(g.dq, inverse_frequencies, layout.positions, /*inverse=*/true, rope_scaling);
  ops::apply_rope(g.dk, inverse_frequencies, layout.positions, /*inverse=*/true, rope_scaling);
  if (p_.q_norm.defined()) {
    g.dq = qk_norm_backward(g.dq, stash_.q_raw, p_.q_norm);
    g.dk = qk_norm_backward(g.dk, stash_.k_raw, p_.k_norm);
  }
  const int64_t gate_width = spec_.output_gate ? nq * d : 0;
  Tensor dqkv = Tensor::empty({tokens, (nq + 2 * nkv) * d + gate_width}, DType::F32);
  set_columns(dqkv, 0, g.dq);
  if (spec_.output_gate) set_columns(dqkv, nq * d, dgate);
  set_columns(dqkv, nq * d + gate_width, g.dk);
  set_columns(dqkv, (nq + nkv) * d + gate_width, g.dv);
  const Tensor normed = input_norm_forward(stash_.input, p_.norm, eps_, norm_offset_);  // recomputed, not kept
  Tensor dnormed = ops::linear_backward(dqkv, normed, p_.qkv.value, p_.qkv.grad, p_.qkv_bias.grad);
  qkv_lora_.backward(dqkv, normed, dnormed);
  return input_norm_backward(dnormed, stash_.input, p_.norm, eps_, dout, norm_offset_);
}

Tensor AttentionBlock::o_input() const {
  const Tensor attended = stash_.attended.view({stash_.attended.size(0), -1});
  return spec_.output_gate ? ops::sigmoid_gated(attended, stash_.gate) : attended;
}

size_t AttentionBlock::stash_bytes() const {
  if (mla_) return mla_->stash_bytes();
  return held_bytes({&stash_.input, &stash_.q_raw, &stash_.k_raw, &stash_.q, &stash_.k, &stash_.v, &stash_.attended,
                     &stash_.gate}) +
         qkv_lora_.stash_bytes() + o_lora_.stash_bytes() + out_norm_.stash_bytes();
}

}  // namespace moetune::model
