// AttentionBlock::forward_cached: the attention half of a decoder layer in a generation, reading and extending the
// KV cache (model/cuda/kv_cache.h). The cache keeps every token's keys, a sliding-window layer's too: the decode
// kernel reads only the window's (ops/cuda/decode_attention.h).
#include "moetune/core/phase_profile.h"
#include "moetune/model/cuda/attention_block.h"
#include "moetune/model/cuda/kv_cache.h"
#include "moetune/ops/cuda/attention.h"
#include "moetune/ops/cuda/attention_sinks.h"
#include "moetune/ops/cuda/decode_attention.h"
#include "moetune/ops/cuda/elementwise.h"
#include "moetune/ops/cuda/gemm.h"
#include "moetune/ops/cuda/norm.h"
#include "moetune/ops/cuda/qkv_rope.h"

namespace moetune::model::cuda {
namespace {
Tensor device_like(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }
}  // namespace

Tensor AttentionBlock::forward_cached(const Tensor& h, const StepContext& context) {
  const PhaseScope phase("attention");
  KvCache& cache = *context.kv_cache;
  const int64_t tokens = h.size(0), d = spec_.qk_head_dim, nq = spec_.num_heads, nkv = spec_.num_kv_heads;
  const int64_t past = cache.tokens();
  Tensor normed = cuda::input_norm_forward(h, p_.norm, eps_, norm_offset_);
  Tensor qkv = device_like({tokens, qkv_width()});
  ops::cuda::linear_forward(normed, p_.qkv.value, p_.qkv_bias.value, qkv);
  normed = Tensor();
  const auto [keys, values] = cache.next_layer(nkv, d, d);
  Tensor q = device_like({tokens, nq, d});
  const Tensor k = keys.narrow(past, tokens), v = values.narrow(past, tokens);
  split_qkv(qkv, context.batch, q, k, v);
  // The training forward's scale, window and sinks (GPT-OSS, the sliding-window families, YaRN's m²).
  Tensor attended = device_like({tokens, nq, d});
  if (past == 0) {
    const Tensor stats =
        ops::cuda::causal_attention_forward(q, k, v, context.batch.documents, scores_scale(), attended, window());
    if (spec_.sinks) ops::cuda::attention_sinks_forward(p_.sinks.value, attended, stats);
  } else {
    ops::cuda::decode_attention_forward(q, keys.narrow(0, past + tokens), values.narrow(0, past + tokens),
                                        scores_scale(), attended, window(), p_.sinks.value);
  }
  Tensor out = device_like(h.shape());
  ops::cuda::linear_forward(o_input(attended, qkv), p_.o.value, p_.o_bias.value, out);
  if (out_norm_.defined())
    out_norm_.forward(out, h, out, /*keep=*/false);  // the norm's output over its input, then + h
  else
    ops::cuda::add(out, h, out);
  return out;
}

}  // namespace moetune::model::cuda
