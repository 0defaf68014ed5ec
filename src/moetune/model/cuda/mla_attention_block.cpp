#include "moetune/model/cuda/mla_attention_block.h"

#include <algorithm>

#include "moetune/core/phase_profile.h"
#include "moetune/model/block_util.h"
#include "moetune/model/cuda/norm_for_backward.h"
#include "moetune/model/memory_plan.h"
#include "moetune/ops/cuda/attention.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/rope.h"

namespace moetune::model::cuda {
namespace {

Tensor device_like(Shape shape, DType dtype = DType::BF16) { return Tensor::empty(std::move(shape), dtype, Device::cuda()); }

}  // namespace

MlaAttentionBlock::Adapters MlaAttentionBlock::Adapters::lookup(const ParameterStore& store, const std::string& layer) {
  const std::string a = layer + "attn.";
  return {LoraLinear::lookup(store, a + "q"),    LoraLinear::lookup(store, a + "q_a"),
          LoraLinear::lookup(store, a + "q_b"),  LoraLinear::lookup(store, a + "kv_a"),
          LoraLinear::lookup(store, a + "kv_b"), LoraLinear::lookup(store, a + "o")};
}

size_t MlaAttentionBlock::Adapters::stash_bytes() const {
  return q.stash_bytes() + q_a.stash_bytes() + q_b.stash_bytes() + kv_a.stash_bytes() + kv_b.stash_bytes() +
         o.stash_bytes();
}

MlaAttentionBlock::MlaAttentionBlock(const ParameterStore& store, const std::string& layer,
                                     const SublayerSpec& sublayer, double norm_eps)
    : spec_(*sublayer.attention()),
      mla_(*spec_.mla),
      eps_(norm_eps),
      qk_width_(gpu_mla_head_widths(spec_).qk),
      v_width_(gpu_mla_head_widths(spec_).v),
      q_in_place_(qk_width_ == mla_.qk_nope_head_dim + mla_.qk_rope_head_dim),
      v_in_kv_(gpu_mla_v_in_kv(spec_)),
      layout_{mla_.qk_nope_head_dim, mla_.qk_rope_head_dim, spec_.v_head_dim, mla_.rope_interleave, mla_.rope_scale},
      p_(MlaParams::lookup(store, layer, sublayer.norm)),
      lora_(Adapters::lookup(store, layer)) {
  MOETUNE_CHECK(p_.q.defined() != mla_.q_lora_rank.has_value(), "{}: the q projections do not match q_lora_rank", layer);
  MOETUNE_CHECK(spec_.num_kv_heads == spec_.num_heads, "{}: MLA expands k and v for every head", layer);
  const int64_t rope = mla_.qk_rope_head_dim;
  inv_freq_ = {spec_.rope, [&](bool long_factors) {
                 return Tensor::from_vector(ops::rope_inverse_frequencies(spec_.rope, rope, long_factors), {rope / 2})
                     .to(Device::cuda());
               }};
}

Tensor MlaAttentionBlock::project_q(const Tensor& x, const StepContext& context) {
  const int64_t tokens = x.size(0), width = spec_.num_heads * (mla_.qk_nope_head_dim + mla_.qk_rope_head_dim);
  Tensor q = device_like({tokens, width});
  if (p_.q.defined()) {
    ops::cuda::linear_forward(x, p_.q.value, {}, q);
    lora_.q.forward(x, q, context.lora_pass());
    return q;
  }
  stash_.q_latent = device_like({tokens, p_.q_a.value.size(0)});
  ops::cuda::linear_forward(x, p_.q_a.value, p_.q_a_bias.value, stash_.q_latent);
  lora_.q_a.forward(x, stash_.q_latent, context.lora_pass());
  stash_.q_normed = device_like(stash_.q_latent.shape());
  ops::cuda::rms_norm_forward(stash_.q_latent, p_.q_a_norm.value, mla_.latent_norm_eps, stash_.q_normed);
  ops::cuda::linear_forward(stash_.q_normed, p_.q_b.value, {}, q);
  lora_.q_b.forward(stash_.q_normed, q, context.lora_pass());
  return q;
}

Tensor MlaAttentionBlock::attended_for_o(const Tensor& attended) const {
  const int64_t tokens = attended.size(0), heads = spec_.num_heads, dv = spec_.v_head_dim;
  if (v_width_ == dv) return attended.view({tokens, heads * dv});
  Tensor narrow = device_like({tokens, heads, dv});
  ops::cuda::copy_leading_columns(attended, narrow);
  return narrow.view({tokens, heads * dv});
}

ops::cuda::HeadColumns MlaAttentionBlock::attention_v() const {
  if (!v_in_kv_) return stash_.v;
  return {stash_.kv, mla_.qk_nope_head_dim, spec_.v_head_dim};
}

MlaAttentionBlock::Projections MlaAttentionBlock::project(const Tensor& h, const StepContext& context) {
  const int64_t tokens = h.size(0), heads = spec_.num_heads, nope = mla_.qk_nope_head_dim, rope = mla_.qk_rope_head_dim;
  const int64_t latent = mla_.kv_lora_rank, dv = spec_.v_head_dim;
  Tensor x = device_like(h.shape());
  ops::cuda::rms_norm_forward(h, p_.norm.value, eps_, x);
  if (context.keep_outputs) stash_.x = x;
  Tensor q_proj = project_q(x, context);
  stash_.kv_a_out = device_like({tokens, latent + rope});
  ops::cuda::linear_forward(x, p_.kv_a.value, p_.kv_a_bias.value, stash_.kv_a_out);
  lora_.kv_a.forward(x, stash_.kv_a_out, context.lora_pass());
  const ops::cuda::ColumnBlock latent_columns(stash_.kv_a_out, 0, latent);
  x = Tensor();
  Tensor kv_normed = device_like({tokens, latent});
  ops::cuda::rms_norm_forward(latent_columns, p_.kv_a_norm.value, mla_.latent_norm_eps, kv_normed);
  Tensor kv = device_like({tokens, heads * (nope + dv)});
  ops::cuda::linear_forward(kv_normed, p_.kv_b.value, {}, kv);
  lora_.kv_b.forward(kv_normed, kv, context.lora_pass());
  if (context.keep_outputs || context.kv_cache) stash_.kv_normed = kv_normed;  // generation caches it
  if (!context.keep_outputs) stash_.q_normed = Tensor();
  return {q_proj.view({tokens, heads, nope + rope}), kv.view({tokens, heads, nope + dv}),
          ops::cuda::ColumnBlock(stash_.kv_a_out, latent, rope)};
}

void MlaAttentionBlock::assemble_qkv(const Projections& projected, const DeviceBatch& batch, Tensor& q, const Tensor& k,
                                     const Tensor& v) {
  const Tensor& inv_freq = inv_freq_.for_positions(batch.layout.positions);
  if (q_in_place_) {
    q = projected.q_proj;
    ops::cuda::mla_qkv_forward_in_place(q, projected.kv, projected.k_rope, inv_freq, batch.positions, layout_, k, v);
  } else {
    q = device_like({projected.q_proj.size(0), spec_.num_heads, qk_width_});
    ops::cuda::mla_qkv_forward(projected.q_proj, projected.kv, projected.k_rope, inv_freq, batch.positions, layout_, q,
                               k, v);
  }
}

Tensor MlaAttentionBlock::attend_out(const Tensor& attended, const Tensor& h, const StepContext& context) {
  Tensor out = device_like(h.shape());
  const Tensor narrow = attended_for_o(attended);
  ops::cuda::linear_forward_residual(narrow, p_.o.value, p_.o_bias.value, h, out);
  lora_.o.forward(narrow, out, context.lora_pass());
  return out;
}

Tensor MlaAttentionBlock::forward(const Tensor& h, const StepContext& context) {
  const PhaseScope phase("attention");
  const DeviceBatch& batch = context.batch;
  const int64_t tokens = h.size(0), heads = spec_.num_heads;
  stash_.input = h;
  PhaseScope part("mla.projections");  // the parts of the attention phase, nested in it
  const Projections projected = project(h, context);
  part.next("mla.qkv");
  stash_.k = device_like({tokens, heads, qk_width_});
  if (v_in_kv_)
    stash_.kv = projected.kv;
  else
    stash_.v = device_like({tokens, heads, v_width_});
  assemble_qkv(projected, batch, stash_.q, stash_.k, stash_.v);
  part.next("mla.flash");
  stash_.attended = device_like({tokens, heads, v_width_});
  stash_.softmax_stats = ops::cuda::causal_attention_forward(stash_.q, stash_.k, attention_v(), batch.documents,
                                                            mla_.softmax_scale, stash_.attended);
  part.next("mla.o");
  return attend_out(stash_.attended, h, context);
}

void MlaAttentionBlock::project_q_backward(const Tensor& dq_proj, const Tensor& x, const Tensor& dx, bool write) {
  if (p_.q.defined()) {
    ops::cuda::linear_backward(dq_proj, x, p_.q.value, dx, p_.q.grad, {}, /*accumulate_dx=*/true, write);
    lora_.q.backward(dq_proj, x, dx);
    return;
  }
  const Tensor normed = norm_for_backward(stash_.q_normed, stash_.q_latent, p_.q_a_norm.value,
                                         mla_.latent_norm_eps, stash_.q_latent.shape());
  Tensor dlatent = device_like(stash_.q_latent.shape());
  ops::cuda::linear_backward(dq_proj, normed, p_.q_b.value, dlatent, p_.q_b.grad, {}, false, write);
  lora_.q_b.backward(dq_proj, normed, dlatent);
  ops::cuda::rms_norm_backward(dlatent, stash_.q_latent, p_.q_a_norm.value, mla_.latent_norm_eps, dlatent,
                               p_.q_a_norm.grad);
  ops::cuda::linear_backward(dlatent, x, p_.q_a.value, dx, p_.q_a.grad, p_.q_a_bias.grad, /*accumulate_dx=*/true,
                             write);
  lora_.q_a.backward(dlatent, x, dx);
}

Tensor MlaAttentionBlock::backward(const Tensor& dout, const StepContext& context) {
  const PhaseScope phase("attention.bwd");
  const DeviceBatch& batch = context.batch;
  const int64_t tokens = dout.size(0), heads = spec_.num_heads, nope = mla_.qk_nope_head_dim, rope = mla_.qk_rope_head_dim;
  const int64_t latent = mla_.kv_lora_rank, dv = spec_.v_head_dim;
  PhaseScope part("mla.bwd.o");
  Tensor dattended_narrow = device_like({tokens, heads * dv});
  const bool write = context.overwrite_gradients;
  const Tensor attended = attended_for_o(stash_.attended);
  ops::cuda::linear_backward(dout, attended, p_.o.value, dattended_narrow, p_.o.grad, p_.o_bias.grad, false, write);
  lora_.o.backward(dout, attended, dattended_narrow);
  Tensor dattended = dattended_narrow.view({tokens, heads, dv});
  if (v_width_ != dv) {
    dattended = device_like({tokens, heads, v_width_});
    ops::cuda::copy_leading_columns(dattended_narrow.view({tokens, heads, dv}), dattended);
  }
  dattended_narrow = Tensor();
  part.next("mla.bwd.flash");
  Tensor dq = device_like(stash_.q.shape()), dk = device_like(stash_.k.shape());
  // dkv = [d(k_nope) | dv] per head: attention writes dv there itself where it reads v in kv.
  Tensor dkv = device_like({tokens, heads * (nope + dv)});
  Tensor dvv = v_in_kv_ ? Tensor() : device_like(stash_.v.shape());
  const ops::cuda::HeadColumns dv_out =
      v_in_kv_ ? ops::cuda::HeadColumns(dkv.view({tokens, heads, nope + dv}), nope, dv) : ops::cuda::HeadColumns(dvv);
  ops::cuda::causal_attention_backward(dattended, stash_.q, stash_.k, attention_v(), stash_.attended,
                                      stash_.softmax_stats, batch.documents, mla_.softmax_scale, dq, dk, dv_out);
  dattended = Tensor();
  part.next("mla.bwd.qkv");
  Tensor dkv_a_out = device_like({tokens, latent + rope});  // [d(c) | d(k_rope)]: kv_a's output gradient
  const ops::cuda::ColumnBlock dk_rope(dkv_a_out, latent, rope);
  Tensor dq_proj;
  const Tensor& inv_freq = inv_freq_.for_positions(batch.layout.positions);
  if (q_in_place_) {
    ops::cuda::mla_qkv_backward_in_place(dq, dk, dvv, inv_freq, batch.positions, layout_,
                                         dkv.view({tokens, heads, nope + dv}), dk_rope);
    dq_proj = dq.view({tokens, heads * (nope + rope)});
  } else {
    dq_proj = device_like({tokens, heads * (nope + rope)});
    ops::cuda::mla_qkv_backward(dq, dk, dvv, inv_freq, batch.positions, layout_,
                                dq_proj.view({tokens, heads, nope + rope}), dkv.view({tokens, heads, nope + dv}),
                                dk_rope);
  }
  dq = dk = dvv = Tensor();
  part.next("mla.bwd.kv");

  const ops::cuda::ColumnBlock latent_columns(stash_.kv_a_out, 0, latent);
  Tensor kv_normed =
      norm_for_backward(stash_.kv_normed, latent_columns, p_.kv_a_norm.value, mla_.latent_norm_eps, {tokens, latent});
  Tensor dlatent = device_like({tokens, latent});
  ops::cuda::linear_backward(dkv, kv_normed, p_.kv_b.value, dlatent, p_.kv_b.grad, {}, false, write);
  lora_.kv_b.backward(dkv, kv_normed, dlatent);
  dkv = kv_normed = Tensor();
  ops::cuda::rms_norm_backward(dlatent, latent_columns, p_.kv_a_norm.value, mla_.latent_norm_eps,
                               ops::cuda::ColumnBlock(dkv_a_out, 0, latent), p_.kv_a_norm.grad);
  dlatent = Tensor();

  const Tensor x = norm_for_backward(stash_.x, stash_.input, p_.norm.value, eps_, stash_.input.shape());
  Tensor dx = device_like(stash_.input.shape());
  ops::cuda::linear_backward(dkv_a_out, x, p_.kv_a.value, dx, p_.kv_a.grad, p_.kv_a_bias.grad, false, write);
  lora_.kv_a.backward(dkv_a_out, x, dx);
  dkv_a_out = Tensor();
  part.next("mla.bwd.q");
  project_q_backward(dq_proj, x, dx, write);
  part.next("mla.bwd.norm");
  Tensor dh = device_like(stash_.input.shape());
  ops::cuda::rms_norm_backward(dx, stash_.input, p_.norm.value, eps_, dh, p_.norm.grad, dout);
  clear_stash();
  return dh;
}

std::vector<Tensor> MlaAttentionBlock::overwritten_gradients() const {
  std::vector<Tensor> grads;
  for (const Tensor& grad : {p_.q.grad, p_.q_a.grad, p_.q_b.grad, p_.kv_a.grad, p_.kv_b.grad, p_.o.grad})
    if (grad.defined()) grads.push_back(grad);
  return grads;
}

size_t MlaAttentionBlock::stash_bytes() const {
  return held_bytes({&stash_.input, &stash_.x, &stash_.q_latent, &stash_.q_normed, &stash_.kv_a_out, &stash_.kv_normed,
                     &stash_.q, &stash_.k, &stash_.v, &stash_.kv, &stash_.attended, &stash_.softmax_stats}) +
         lora_.stash_bytes();
}

void MlaAttentionBlock::clear_stash() {
  stash_ = {};
  for (LoraLinear* adapters : lora_.all()) adapters->clear_stash();
}

}  // namespace moetune::model::cuda
