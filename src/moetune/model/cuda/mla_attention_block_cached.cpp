// MlaAttentionBlock::forward_cached: multi-head latent attention in a generation. The cache holds one row a token,
// [rms_norm(c) | rotated k_rope] (latent + rope values: DeepSeek-V3's 576, against heads · (q/k + v) = 5,120 for
// Moonlight's expanded heads), and a decode step attends with kv_b folded into q and the output
// (ops/cuda/mla_absorbed.h): q_abs = [q_nope · W_uk | rope(q_rope)] against the cached rows, whose latent part is also
// the value, then W_uv per head. The prompt (nothing cached yet) attends as the training forward does, through
// cuDNN on the expanded k and v, and writes its rows. With adapters on kv_b the absorbed weights would have to
// include them: that case keeps each head's expanded k and v in the cache instead (the split-K kernel's keys and
// values of different widths).
#include "moetune/core/cuda_runtime.h"
#include "moetune/core/phase_profile.h"
#include "moetune/model/cuda/kv_cache.h"
#include "moetune/model/cuda/mla_attention_block.h"
#include "moetune/ops/cuda/attention.h"
#include "moetune/ops/cuda/decode_attention.h"
#include "moetune/ops/cuda/mla_absorbed.h"

namespace moetune::model::cuda {
namespace {

Tensor device_bf16(Shape shape) { return Tensor::empty(std::move(shape), DType::BF16, Device::cuda()); }
constexpr size_t kBf16 = 2;

}  // namespace

Tensor MlaAttentionBlock::forward_cached(const Tensor& h, const StepContext& context) {
  const PhaseScope phase("attention");
  KvCache& cache = *context.kv_cache;
  const int64_t tokens = h.size(0), heads = spec_.num_heads, past = cache.tokens();
  const int64_t nope = mla_.qk_nope_head_dim, rope = mla_.qk_rope_head_dim, latent = mla_.kv_lora_rank;
  const Projections projected = project(h, context);
  Tensor attended = device_bf16({tokens, heads, v_width_});
  Tensor q;
  if (!lora_.kv_b.empty()) {  // expanded heads in the cache
    const auto [keys, values] = cache.next_layer(heads, qk_width_, v_width_);
    const Tensor k = keys.narrow(past, tokens), v = values.narrow(past, tokens);
    assemble_qkv(projected, context.batch, q, k, v);
    if (past == 0)
      ops::cuda::causal_attention_forward(q, k, v, context.batch.documents, mla_.softmax_scale, attended);
    else
      ops::cuda::decode_attention_forward(q, keys.narrow(0, past + tokens), values.narrow(0, past + tokens),
                                          mla_.softmax_scale, attended);
  } else {
    const Tensor rows = cache.next_layer(1, latent + rope, 0).first;
    const Tensor latent_rows = rows.view({rows.size(0), latent + rope});
    const Tensor k = device_bf16({tokens, heads, qk_width_}), v = device_bf16({tokens, heads, v_width_});
    assemble_qkv(projected, context.batch, q, k, v);
    // The new rows: kv_a_layernorm(c) as project() left it, then the rope key as attention's k holds it rotated
    // (head 0's columns).
    char* first_row = static_cast<char*>(latent_rows.narrow(past, tokens).raw_data());
    const size_t row_pitch = size_t(latent + rope) * kBf16;
    gpu::copy_rows(first_row, row_pitch, stash_.kv_normed.raw_data(), size_t(latent) * kBf16, size_t(latent) * kBf16,
                   size_t(tokens), "the latent cache's rows");
    gpu::copy_rows(first_row + size_t(latent) * kBf16, row_pitch,
                   static_cast<const char*>(k.raw_data()) + size_t(nope) * kBf16, size_t(heads * qk_width_) * kBf16,
                   size_t(rope) * kBf16, size_t(tokens), "the latent cache's rope keys");
    if (past == 0) {
      ops::cuda::causal_attention_forward(q, k, v, context.batch.documents, mla_.softmax_scale, attended);
    } else {
      const ops::cuda::MlaAbsorbedWidths widths{nope, rope, spec_.v_head_dim, latent};
      Tensor q_abs = device_bf16({tokens, heads, latent + rope});
      ops::cuda::mla_absorb_q(q, p_.kv_b.value, widths, q_abs);
      Tensor o_latent = device_bf16({tokens, heads, latent});
      ops::cuda::decode_latent_attention_forward(q_abs, latent_rows.narrow(0, past + tokens), latent,
                                                 mla_.softmax_scale, o_latent);
      ops::cuda::mla_absorb_out(o_latent, p_.kv_b.value, widths, attended);
    }
  }
  Tensor out = attend_out(attended, h, context);
  clear_stash();  // no backward pass follows: the projections' stash goes now, not at the next token
  return out;
}

}  // namespace moetune::model::cuda
