// MlaAttentionBlock::forward_cached: multi-head latent attention in a generation. The cache holds each head's
// expanded k ([nope | rope], the q/k width) and v (the v width) rather than the compressed latent and rope key:
// the decode step then reads keys and values as any attention layer's, through the same split-K kernel
// (ops/cuda/decode_attention.h), at heads · (q/k + v width) values a token (Moonlight: 16 · 320 = 5120, against
// 576 for the latent form). The latent form needs attention with kv_b folded into q and o (the "absorbed" MLA of
// DeepSeek-V2's paper): a kernel of its own, for a cache 9x smaller; this path keeps generation exact to the
// training forward, which the tests compare it with.
#include "moetune/core/phase_profile.h"
#include "moetune/model/cuda/kv_cache.h"
#include "moetune/model/cuda/mla_attention_block.h"
#include "moetune/ops/cuda/attention.h"
#include "moetune/ops/cuda/decode_attention.h"

namespace moetune::model::cuda {

Tensor MlaAttentionBlock::forward_cached(const Tensor& h, const StepContext& context) {
  const PhaseScope phase("attention");
  KvCache& cache = *context.kv_cache;
  const int64_t tokens = h.size(0), heads = spec_.num_heads, past = cache.tokens();
  const Projections projected = project(h, context);
  const auto [keys, values] = cache.next_layer(heads, qk_width_, v_width_);
  const Tensor k = keys.narrow(past, tokens), v = values.narrow(past, tokens);
  Tensor q;
  assemble_qkv(projected, context.batch.positions, q, k, v);
  Tensor attended = Tensor::empty({tokens, heads, v_width_}, DType::BF16, Device::cuda());
  if (past == 0)
    ops::cuda::causal_attention_forward(q, k, v, context.batch.documents, mla_.softmax_scale, attended);
  else
    ops::cuda::decode_attention_forward(q, keys.narrow(0, past + tokens), values.narrow(0, past + tokens),
                                        mla_.softmax_scale, attended);
  Tensor out = attend_out(attended, h, context);
  clear_stash();  // no backward pass follows: the projections' stash goes now, not at the next token
  return out;
}

}  // namespace moetune::model::cuda
