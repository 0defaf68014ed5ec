#include "moetune/model/cuda/attention_block.h"

#include <algorithm>

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"
#include "moetune/model/cuda/qk_norm_across_heads.h"
#include "moetune/ops/cuda/attention_sinks.h"
#include "moetune/ops/cuda/gate.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/cuda/qkv_rope.h"
#include "moetune/ops/rope.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape, DType dtype = DType::BF16) {
  return Tensor::empty(std::move(shape), dtype, Device::cuda());
}
}  // namespace

AttentionBlock::AttentionBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer,
                               double norm_eps)
    : spec_(*sublayer.attention()),
      eps_(norm_eps),
      norm_offset_(sublayer.norm_weight_offset),
      p_(spec_.mla ? AttentionParams{} : AttentionParams::lookup(store, layer, sublayer.norm)),
      // An MLA sublayer's adapters are its block's (MlaAttentionBlock::Adapters).
      qkv_lora_(spec_.mla ? LoraLinear() : LoraLinear::lookup(store, layer + "attn.qkv")),
      o_lora_(spec_.mla ? LoraLinear() : LoraLinear::lookup(store, layer + "attn.o")),
      out_norm_(sublayer_norm(store, layer, sublayer.out_norm), norm_eps, sublayer.norm_weight_offset,
                sublayer.residual_scale),
      mla_(spec_.mla ? std::make_unique<MlaAttentionBlock>(store, layer, sublayer, norm_eps) : nullptr) {
  if (mla_) return;
  MOETUNE_CHECK(norm_offset_ == 0.0f || !spec_.qk_norm_across_heads,
                "{}: q/k norms across heads scaling by an offset weight are not implemented", layer);
  MOETUNE_CHECK(!spec_.output_gate || !spec_.qk_norm_across_heads,
                "{}: an output gate beside q/k norms across heads is not implemented", layer);
  MOETUNE_CHECK(spec_.qk_head_dim == spec_.v_head_dim,
                "{}: differing q/k and v head dims are not implemented on the GPU outside latent attention", layer);
  MOETUNE_CHECK(spec_.sinks == p_.sinks.defined(), "{}: the spec and the parameters disagree on attention sinks",
                layer);
  const int64_t d = spec_.qk_head_dim;
  if (spec_.rope.type == "none")
    return;  // Nemotron-H's attention has no positional embedding: inv_freq_ stays undefined
  const std::vector<float> frequencies = ops::rope_inverse_frequencies(spec_.rope, d);
  inv_freq_ = {spec_.rope, [&](bool long_factors) {
                 const std::vector<float> set =
                     long_factors ? ops::rope_inverse_frequencies(spec_.rope, d, long_factors) : frequencies;
                 return Tensor::from_vector(set, {d / 2}).to(Device::cuda());
               }};
  // Zero frequencies (partial rotation) sit at the same pairs under longrope's long factors.
  if (std::find(frequencies.begin(), frequencies.end(), 0.0f) != frequencies.end())
    rotated_scale_ = ops::rope_attention_scaling(spec_.rope);
}

double AttentionBlock::scores_scale() const {
  // Every pair rotating, RoPE's factor m scales all of q and k alike: m² on the scores, one multiply fewer per value.
  const double m = rotated_scale_ == 1.0 ? ops::rope_attention_scaling(spec_.rope) : 1.0;
  return spec_.softmax_scale() * m * m;
}

void AttentionBlock::split_qkv(const Tensor& qkv, const DeviceBatch& batch, const Tensor& q, const Tensor& k,
                               const Tensor& v) const {
  const Tensor& inv_freq = inv_freq_.for_positions(batch.layout.positions);
  if (!spec_.qk_norm_across_heads) {
    ops::cuda::qkv_norm_rope_forward(qkv, p_.q_norm.value, p_.k_norm.value, eps_, inv_freq, batch.positions, q, k, v,
                                     rotated_scale_, norm_offset_, gate_heads());
    return;
  }
  const int64_t d = spec_.qk_head_dim;
  const Tensor normed = qkv_normed_across_heads(qkv, p_.q_norm.value, p_.k_norm.value, eps_,
                                                {spec_.num_heads * d, spec_.num_kv_heads * d});
  ops::cuda::qkv_norm_rope_forward(normed, {}, {}, eps_, inv_freq, batch.positions, q, k, v, rotated_scale_);
}

Tensor AttentionBlock::o_input(const Tensor& attended, const Tensor& qkv) const {
  const int64_t tokens = attended.size(0), width = spec_.num_heads * spec_.qk_head_dim;
  if (!spec_.output_gate) return attended.view({tokens, width});
  Tensor gated = device_like({tokens, width});
  ops::cuda::sigmoid_gated(attended, ops::cuda::ColumnBlock(qkv, width, width), gated);
  return gated;
}

Tensor AttentionBlock::forward(const Tensor& h, const StepContext& context) {
  if (mla_) return context.kv_cache ? mla_->forward_cached(h, context) : mla_->forward(h, context);
  if (context.kv_cache) return forward_cached(h, context);
  const PhaseScope phase("attention");
  const DeviceBatch& batch = context.batch;
  const int64_t tokens = h.size(0), d = spec_.qk_head_dim, nq = spec_.num_heads, nkv = spec_.num_kv_heads;
  const double eps = eps_;
  stash_.input = h;
  Tensor normed = cuda::input_norm_forward(h, p_.norm, eps, norm_offset_);
  stash_.qkv = device_like({tokens, qkv_width()});
  ops::cuda::linear_forward(normed, p_.qkv.value, p_.qkv_bias.value, stash_.qkv);
  qkv_lora_.forward(normed, stash_.qkv, context.lora_pass());
  if (context.keep_outputs && p_.norm.defined()) stash_.normed = normed;
  normed = Tensor();
  stash_.q = device_like({tokens, nq, d});
  stash_.k = device_like({tokens, nkv, d});
  stash_.v = device_like({tokens, nkv, d});
  split_qkv(stash_.qkv, batch, stash_.q, stash_.k, stash_.v);
  stash_.attended = device_like({tokens, nq, d});
  stash_.softmax_stats = ops::cuda::causal_attention_forward(stash_.q, stash_.k, stash_.v, batch.documents,
                                                             scores_scale(), stash_.attended, window());
  if (spec_.sinks) ops::cuda::attention_sinks_forward(p_.sinks.value, stash_.attended, stash_.softmax_stats);
  Tensor out = device_like(h.shape());
  const Tensor attended = o_input(stash_.attended, stash_.qkv);
  if (!out_norm_.defined()) {
    ops::cuda::linear_forward_residual(attended, p_.o.value, p_.o_bias.value, h, out);
    o_lora_.forward(attended, out, context.lora_pass());
    return out;
  }
  Tensor mixed = device_like(h.shape());
  ops::cuda::linear_forward(attended, p_.o.value, p_.o_bias.value, mixed);
  o_lora_.forward(attended, mixed, context.lora_pass());
  out_norm_.forward(mixed, h, out);
  return out;
}

Tensor AttentionBlock::backward(const Tensor& dout, const StepContext& context) {
  if (mla_) return mla_->backward(dout, context);
  const PhaseScope phase("attention.bwd");
  const DeviceBatch& batch = context.batch;
  const int64_t tokens = dout.size(0), d = spec_.qk_head_dim, nq = spec_.num_heads, nkv = spec_.num_kv_heads;
  const double eps = eps_;
  Tensor dattended = device_like({tokens, nq * d});
  const Tensor dmixed = out_norm_.backward(dout);  // dout itself without an output norm
  {
    const Tensor attended = o_input(stash_.attended, stash_.qkv);  // recomputed with a gate
    ops::cuda::linear_backward(dmixed, attended, p_.o.value, dattended, p_.o.grad, p_.o_bias.grad, false,
                               context.overwrite_gradients);
    o_lora_.backward(dmixed, attended, dattended);
  }
  Tensor dqkv = device_like({tokens, qkv_width()});
  if (spec_.output_gate)  // through attended ⊙ sigmoid(gate): the gate's gradient into its columns of dqkv
    ops::cuda::sigmoid_gated_backward(dattended, stash_.attended, ops::cuda::ColumnBlock(stash_.qkv, nq * d, nq * d),
                                      dattended, ops::cuda::ColumnBlock(dqkv, nq * d, nq * d));
  Tensor dq = device_like({tokens, nq, d}), dk = device_like({tokens, nkv, d}), dv = device_like({tokens, nkv, d});
  if (spec_.sinks && p_.sinks.grad.defined())
    ops::cuda::attention_sinks_backward(p_.sinks.value, dattended.view({tokens, nq, d}), stash_.attended,
                                        stash_.softmax_stats, p_.sinks.grad);
  ops::cuda::causal_attention_backward(dattended.view({tokens, nq, d}), stash_.q, stash_.k, stash_.v, stash_.attended,
                                       stash_.softmax_stats, batch.documents, scores_scale(), dq, dk, dv, window());
  dattended = Tensor();
  const Tensor& inv_freq = inv_freq_.for_positions(batch.layout.positions);
  if (spec_.qk_norm_across_heads) {  // RoPE's backward alone, then the norms' over whole column blocks
    ops::cuda::qkv_norm_rope_backward(dq, dk, dv, stash_.qkv, {}, {}, eps, inv_freq, batch.positions, dqkv, {}, {},
                                      rotated_scale_);
    qk_norm_across_heads_backward(dqkv, stash_.qkv, p_.q_norm.value, p_.k_norm.value, eps, {nq * d, nkv * d},
                                  p_.q_norm.grad, p_.k_norm.grad);
  } else {
    ops::cuda::qkv_norm_rope_backward(dq, dk, dv, stash_.qkv, p_.q_norm.value, p_.k_norm.value, eps, inv_freq,
                                      batch.positions, dqkv, p_.q_norm.grad, p_.k_norm.grad, rotated_scale_,
                                      norm_offset_, gate_heads());
  }
  dq = dk = dv = Tensor();
  Tensor normed = cuda::input_norm_for_backward(stash_.normed, stash_.input, p_.norm, eps, norm_offset_);
  Tensor dnormed = device_like(stash_.input.shape());
  ops::cuda::linear_backward(dqkv, normed, p_.qkv.value, dnormed, p_.qkv.grad, p_.qkv_bias.grad, false,
                             context.overwrite_gradients);
  qkv_lora_.backward(dqkv, normed, dnormed);
  Tensor dh = device_like(stash_.input.shape());
  cuda::input_norm_backward(dnormed, stash_.input, p_.norm, eps, dh, dout, norm_offset_);
  clear_stash();
  return dh;
}

std::vector<Tensor> AttentionBlock::overwritten_gradients() const {
  if (mla_) return mla_->overwritten_gradients();
  std::vector<Tensor> grads;
  for (const Tensor& grad : {p_.qkv.grad, p_.o.grad})
    if (grad.defined()) grads.push_back(grad);
  return grads;
}

size_t AttentionBlock::stash_bytes() const {
  if (mla_) return mla_->stash_bytes();
  return held_bytes({&stash_.input, &stash_.normed, &stash_.qkv, &stash_.q, &stash_.k, &stash_.v, &stash_.attended,
                     &stash_.softmax_stats}) +
         qkv_lora_.stash_bytes() + o_lora_.stash_bytes() + out_norm_.stash_bytes();
}

}  // namespace moetune::model::cuda
