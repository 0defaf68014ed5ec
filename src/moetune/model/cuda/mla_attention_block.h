// DeepSeek-V3's multi-head latent attention on the GPU, as the CPU block (model/mla_attention_block.h) and
// transformers 5.17's DeepseekV3Attention compute it:
//   x = rms_norm(h); q = q_b(rms_norm(q_a(x))) or q(x); c = kv_a(x)[:latent], k_rope = kv_a(x)[latent:]
//   [k_nope | v] per head = kv_b(rms_norm(c)); h + o(flash_attention([q_nope | rope(q_rope)], [k_nope | rope(k_rope)], v))
// kv_a runs as one GEMM into [T, latent + rope]: kv_a_layernorm reads c and the q/k/v kernels read k_rope as blocks
// of its columns in place (ops/cuda/column_block.h), and the backward pass writes d(c) and d(k_rope) into one
// [T, latent + rope] gradient for kv_a's one backward GEMM pair. q/k and v keep
// their own head widths in cuDNN's attention (192 and 128 for DeepSeek-V3), each rounded up to a multiple of 8
// with zero columns (and q/k's raised to v's if v's is wider), which changes no score and no kept output.
#pragma once

#include "moetune/model/cuda/lora_linear.h"
#include "moetune/model/cuda/step_context.h"
#include "moetune/model/mla_attention_block.h"
#include "moetune/model/model_spec.h"
#include "moetune/ops/cuda/attention.h"
#include "moetune/ops/cuda/mla_qkv.h"

namespace moetune::model::cuda {

class MlaAttentionBlock {
 public:
  MlaAttentionBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);
  // Generation: the new tokens' rows [rms_norm(c) | rotated k_rope] go into the KV cache (context.kv_cache), and the
  // new tokens attend to every cached token with kv_b folded into q and the output; with adapters on kv_b, each
  // head's expanded k and v instead (mla_attention_block_cached.cpp).
  Tensor forward_cached(const Tensor& h, const StepContext& context);
  Tensor backward(const Tensor& dout, const StepContext& context);
  size_t stash_bytes() const;
  // The gradients its backward pass writes whole on a step's first pass (StepContext::overwrite_gradients): the
  // projections' weight gradients (their biases' add).
  std::vector<Tensor> overwritten_gradients() const;
  void clear_stash();

 private:
  // LoRA adapters on the six projections, each empty without them (PEFT's q_proj, q_a_proj, q_b_proj,
  // kv_a_proj_with_mqa, kv_b_proj, o_proj), as the CPU block runs them: each adds into its projection's output
  // right after the GEMM, before anything reads or rotates it in place.
  struct Adapters {
    LoraLinear q, q_a, q_b, kv_a, kv_b, o;
    static Adapters lookup(const ParameterStore& store, const std::string& layer);
    std::vector<LoraLinear*> all() { return {&q, &q_a, &q_b, &kv_a, &kv_b, &o}; }
    size_t stash_bytes() const;
  };

  // What the projections give attention: q_proj [T, heads, nope + rope], kv_b's output [T, heads, nope + v_dim]
  // and the rope key (a column block of stash_.kv_a_out).
  struct Projections {
    Tensor q_proj, kv;
    ops::cuda::ColumnBlock k_rope;
  };
  Projections project(const Tensor& h, const StepContext& context);
  // Attention's q (q_proj rotated in place where it can be, else a new tensor), and k and v written into the given
  // [T, heads, width] tensors (v undefined: read in kv's columns).
  void assemble_qkv(const Projections& projected, const DeviceBatch& batch, Tensor& q, const Tensor& k,
                    const Tensor& v);
  Tensor attend_out(const Tensor& attended, const Tensor& h, const StepContext& context);  // h + o(attended)
  Tensor project_q(const Tensor& x, const StepContext& context);  // [T, heads·(nope + rope)]
  // Adds into dx; writes the weight gradients when `write` (StepContext::overwrite_gradients).
  void project_q_backward(const Tensor& dq_proj, const Tensor& x, const Tensor& dx, bool write);
  Tensor attended_for_o(const Tensor& attended) const;  // [T, heads·v_dim]: the padding dropped
  ops::cuda::HeadColumns attention_v() const;            // v as attention reads it: its own tensor or kv's columns

  const AttentionSpec& spec_;
  const MlaSpec& mla_;
  double eps_;
  int64_t qk_width_, v_width_;  // the attention tensors' head widths
  bool q_in_place_;              // qk_width_ is q_proj's: q is q_proj rotated in place, dq becomes dq_proj in place
  bool v_in_kv_;                 // attention reads v in kv_b's output, writes dv in its gradient (ops/mla_v_in_place.h)
  ops::cuda::MlaQkvLayout layout_;
  ops::RopeFactorSets<Tensor> inv_freq_;  // F32 [rope / 2] on the device (longrope's short and long)
  MlaParams p_;
  Adapters lora_;
  struct Stash {
    Tensor input;          // h
    Tensor q_latent;       // q_a(x) before its norm; undefined without q_lora_rank
    Tensor kv_a_out;       // kv_a(x) [T, latent + rope]: c before kv_a_layernorm, then k_rope before RoPE
    // The norms' outputs where the step keeps them (StepContext::keep_outputs), else undefined: x = rms_norm(h),
    // q_a_layernorm(q_latent) (with q_lora_rank), kv_a_layernorm(c) (kept in generation too: the cache's rows).
    Tensor x, q_normed, kv_normed;
    Tensor q, k, v;        // attention's inputs [T, heads, width]; v undefined where read in kv (v_in_kv_)
    Tensor kv;             // kv_b's output [T, heads, nope + v_dim], where attention reads v in it; else undefined
    Tensor attended;       // [T, heads, v_width]
    Tensor softmax_stats;  // flash attention's log-sum-exp
  } stash_;
};

}  // namespace moetune::model::cuda
