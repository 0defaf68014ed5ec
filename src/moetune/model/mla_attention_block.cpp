#include "moetune/model/mla_attention_block.h"

#include <algorithm>

#include "moetune/model/block_util.h"
#include "moetune/ops/attention.h"
#include "moetune/ops/linear.h"
#include "moetune/ops/norm.h"

namespace moetune::model {
namespace {

// Copies x [T, heads, d] into columns [first, first + d) of each head of out [T, heads, width].
void place_per_head(const Tensor& out, int64_t first, const Tensor& x) {
  set_columns(out.view({-1, out.size(2)}), first, x.view({-1, x.size(2)}));
}

// Columns [first, first + count) of each head of x [T, heads, width], as [T, heads, count].
Tensor take_per_head(const Tensor& x, int64_t first, int64_t count) {
  return columns(x.view({-1, x.size(2)}), first, count).view({x.size(0), x.size(1), count});
}

// The rope part's rotation under the short (and, with longrope, the long) factors.
ops::RopeFactorSets<ops::MlaRope> rope_rotations(const AttentionSpec& a) {
  return {a.rope, [&](bool long_factors) {
            return ops::MlaRope{ops::rope_inverse_frequencies(a.rope, a.mla->qk_rope_head_dim, long_factors),
                                a.mla->rope_interleave, float(a.mla->rope_scale)};
          }};
}

}  // namespace

MlaParams MlaParams::lookup(const ParameterStore& store, const std::string& layer, const std::string& norm) {
  const std::string a = layer + "attn.";
  return {store.get(layer + norm),       store.find(a + "q"),    store.find(a + "q_a"),       store.find(a + "q_a_bias"),
          store.find(a + "q_a_norm"),    store.find(a + "q_b"),  store.get(a + "kv_a"),       store.find(a + "kv_a_bias"),
          store.get(a + "kv_a_norm"),    store.get(a + "kv_b"),  store.get(a + "o"),          store.find(a + "o_bias")};
}

MlaAttentionBlock::Adapters MlaAttentionBlock::Adapters::lookup(const ParameterStore& store, const std::string& layer) {
  const std::string a = layer + "attn.";
  return {LoraLinear::lookup(store, a + "q"),    LoraLinear::lookup(store, a + "q_a"),
          LoraLinear::lookup(store, a + "q_b"),  LoraLinear::lookup(store, a + "kv_a"),
          LoraLinear::lookup(store, a + "kv_b"), LoraLinear::lookup(store, a + "o")};
}

MlaAttentionBlock::MlaAttentionBlock(const ParameterStore& store, const std::string& layer,
                                     const SublayerSpec& sublayer, double norm_eps)
    : spec_(*sublayer.attention()),
      mla_(*spec_.mla),
      eps_(norm_eps),
      width_(std::max(spec_.qk_head_dim, spec_.v_head_dim)),
      rope_(rope_rotations(spec_)),
      p_(MlaParams::lookup(store, layer, sublayer.norm)),
      lora_(Adapters::lookup(store, layer)) {
  MOETUNE_CHECK(p_.q.defined() != mla_.q_lora_rank.has_value(), "{}: the q projections do not match q_lora_rank", layer);
  MOETUNE_CHECK(spec_.num_kv_heads == spec_.num_heads, "{}: MLA expands k and v for every head", layer);
}

Tensor MlaAttentionBlock::project_q(const Tensor& x, const StepContext& context) {
  if (p_.q.defined()) {
    Tensor q = ops::linear_forward(x, p_.q.value);
    lora_.q.forward(x, q, context.training, context.lora_draw);
    return q;
  }
  stash_.q_latent = ops::linear_forward(x, p_.q_a.value, p_.q_a_bias.value);
  lora_.q_a.forward(x, stash_.q_latent, context.training, context.lora_draw);
  const Tensor q_normed = ops::rms_norm_forward(stash_.q_latent, p_.q_a_norm.value, mla_.latent_norm_eps);
  Tensor q = ops::linear_forward(q_normed, p_.q_b.value);
  lora_.q_b.forward(q_normed, q, context.training, context.lora_draw);
  return q;
}

Tensor MlaAttentionBlock::forward(const Tensor& h, const StepContext& context) {
  const std::vector<int64_t>& positions = context.layout.positions;
  const ops::MlaRope& rotation = rope_.for_positions(positions);
  const int64_t tokens = h.size(0), heads = spec_.num_heads, nope = mla_.qk_nope_head_dim, rope = mla_.qk_rope_head_dim;
  const int64_t latent = mla_.kv_lora_rank, dv = spec_.v_head_dim;
  stash_.input = h;
  const Tensor x = ops::rms_norm_forward(h, p_.norm.value, eps_);
  const Tensor q = project_q(x, context).view({tokens, heads, nope + rope});
  const Tensor compressed = ops::linear_forward(x, p_.kv_a.value, p_.kv_a_bias.value);  // [T, latent + rope]
  lora_.kv_a.forward(x, compressed, context.training, context.lora_draw);
  stash_.kv_latent = columns(compressed, 0, latent);
  const Tensor k_rope =
      ops::mla_rope_forward(columns(compressed, latent, rope).view({tokens, 1, rope}), rotation, positions);
  const Tensor kv_normed = ops::rms_norm_forward(stash_.kv_latent, p_.kv_a_norm.value, mla_.latent_norm_eps);
  Tensor kv_flat = ops::linear_forward(kv_normed, p_.kv_b.value);
  lora_.kv_b.forward(kv_normed, kv_flat, context.training, context.lora_draw);
  const Tensor kv = kv_flat.view({tokens, heads, nope + dv});

  // The CPU attention op takes one head width: zero columns pad the narrower of q/k and v, changing no score
  // and no output column that is kept.
  stash_.q = Tensor::zeros({tokens, heads, width_}, DType::F32);
  stash_.k = Tensor::zeros({tokens, heads, width_}, DType::F32);
  stash_.v = Tensor::zeros({tokens, heads, width_}, DType::F32);
  place_per_head(stash_.q, 0, take_per_head(q, 0, nope));
  place_per_head(stash_.q, nope, ops::mla_rope_forward(take_per_head(q, nope, rope), rotation, positions));
  place_per_head(stash_.k, 0, take_per_head(kv, 0, nope));
  for (int64_t head = 0; head < heads; ++head)  // the shared rope key, in every head
    for (int64_t t = 0; t < tokens; ++t)
      std::copy_n(k_rope.data<float>() + t * rope, rope, stash_.k.data<float>() + (t * heads + head) * width_ + nope);
  place_per_head(stash_.v, 0, take_per_head(kv, nope, dv));
  stash_.attended =
      attention_forward(stash_.q, stash_.k, stash_.v, context.layout.mask, mla_.softmax_scale, {}, context.kv_cache);
  const Tensor attended = take_per_head(stash_.attended, 0, dv).view({tokens, heads * dv});
  Tensor out = ops::linear_forward(attended, p_.o.value, p_.o_bias.value);
  lora_.o.forward(attended, out, context.training, context.lora_draw);
  return add(h, out);
}

Tensor MlaAttentionBlock::project_q_backward(const Tensor& dq, const Tensor& x) {
  if (p_.q.defined()) {
    Tensor dx = ops::linear_backward(dq, x, p_.q.value, p_.q.grad);
    lora_.q.backward(dq, x, dx);
    return dx;
  }
  const Tensor q_normed = ops::rms_norm_forward(stash_.q_latent, p_.q_a_norm.value, mla_.latent_norm_eps);
  Tensor dlatent = ops::linear_backward(dq, q_normed, p_.q_b.value, p_.q_b.grad);
  lora_.q_b.backward(dq, q_normed, dlatent);
  dlatent = ops::rms_norm_backward(dlatent, stash_.q_latent, p_.q_a_norm.value, mla_.latent_norm_eps, p_.q_a_norm.grad);
  Tensor dx = ops::linear_backward(dlatent, x, p_.q_a.value, p_.q_a.grad, p_.q_a_bias.grad);
  lora_.q_a.backward(dlatent, x, dx);
  return dx;
}

Tensor MlaAttentionBlock::backward(const Tensor& dout, const StepContext& context) {
  const std::vector<int64_t>& positions = context.layout.positions;
  const ops::MlaRope& rotation = rope_.for_positions(positions);
  const int64_t tokens = dout.size(0), heads = spec_.num_heads, nope = mla_.qk_nope_head_dim, rope = mla_.qk_rope_head_dim;
  const int64_t latent = mla_.kv_lora_rank, dv = spec_.v_head_dim;
  const Tensor attended = take_per_head(stash_.attended, 0, dv).view({tokens, heads * dv});
  const Tensor dattended_narrow = ops::linear_backward(dout, attended, p_.o.value, p_.o.grad, p_.o_bias.grad);
  lora_.o.backward(dout, attended, dattended_narrow);
  Tensor dattended = Tensor::zeros({tokens, heads, width_}, DType::F32);
  place_per_head(dattended, 0, dattended_narrow.view({tokens, heads, dv}));
  const ops::AttentionGrads g = ops::causal_attention_backward(dattended, stash_.q, stash_.k, stash_.v, stash_.attended,
                                                               context.layout.mask, mla_.softmax_scale);

  // q: [dq_nope | rope⁻¹(dq_rope)] per head.
  Tensor dq = Tensor::empty({tokens, heads, nope + rope}, DType::F32);
  place_per_head(dq, 0, take_per_head(g.dq, 0, nope));
  place_per_head(dq, nope, ops::mla_rope_backward(take_per_head(g.dq, nope, rope), rotation, positions));

  // k and v: per head [dk_nope | dv] into kv_b; the shared rope key gathers every head's gradient.
  Tensor dkv = Tensor::empty({tokens, heads, nope + dv}, DType::F32);
  place_per_head(dkv, 0, take_per_head(g.dk, 0, nope));
  place_per_head(dkv, nope, take_per_head(g.dv, 0, dv));
  Tensor dk_rope = Tensor::zeros({tokens, 1, rope}, DType::F32);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t head = 0; head < heads; ++head) {
      const float* row = g.dk.data<float>() + (t * heads + head) * width_ + nope;
      for (int64_t i = 0; i < rope; ++i) dk_rope.data<float>()[t * rope + i] += row[i];
    }
  const Tensor kv_normed = ops::rms_norm_forward(stash_.kv_latent, p_.kv_a_norm.value, mla_.latent_norm_eps);
  const Tensor dkv_flat = dkv.view({tokens, heads * (nope + dv)});
  Tensor dlatent = ops::linear_backward(dkv_flat, kv_normed, p_.kv_b.value, p_.kv_b.grad);
  lora_.kv_b.backward(dkv_flat, kv_normed, dlatent);
  dlatent = ops::rms_norm_backward(dlatent, stash_.kv_latent, p_.kv_a_norm.value, mla_.latent_norm_eps, p_.kv_a_norm.grad);
  Tensor dcompressed = Tensor::empty({tokens, latent + rope}, DType::F32);
  set_columns(dcompressed, 0, dlatent);
  set_columns(dcompressed, latent, ops::mla_rope_backward(dk_rope, rotation, positions).view({tokens, rope}));

  const Tensor x = ops::rms_norm_forward(stash_.input, p_.norm.value, eps_);  // recomputed, not kept
  Tensor dx = ops::linear_backward(dcompressed, x, p_.kv_a.value, p_.kv_a.grad, p_.kv_a_bias.grad);
  lora_.kv_a.backward(dcompressed, x, dx);
  dx = add(dx, project_q_backward(dq.view({tokens, heads * (nope + rope)}), x));
  return add(dout, ops::rms_norm_backward(dx, stash_.input, p_.norm.value, eps_, p_.norm.grad));
}

size_t MlaAttentionBlock::stash_bytes() const {
  size_t bytes = held_bytes(
      {&stash_.input, &stash_.q_latent, &stash_.kv_latent, &stash_.q, &stash_.k, &stash_.v, &stash_.attended});
  for (const LoraLinear* adapters : lora_.all()) bytes += adapters->stash_bytes();
  return bytes;
}

void MlaAttentionBlock::clear_stash() {
  stash_ = {};
  for (LoraLinear* adapters : {&lora_.q, &lora_.q_a, &lora_.q_b, &lora_.kv_a, &lora_.kv_b, &lora_.o})
    adapters->clear_stash();
}

}  // namespace moetune::model
