// The attention half of a decoder layer on the GPU: h + o_proj(flash_attention(rope(norm(q)), rope(norm(k)), v)),
// with q, k, v from one fused projection of rms_norm(h). GPT-OSS adds a sliding window (in the flash attention),
// per-head sinks (ops/cuda/attention_sinks.h) and YaRN's attention scaling (folded into the softmax scale); Qwen3-Next
// a sigmoid gate on the attention's output (AttentionSpec::output_gate: the gate's logits come from the qkv
// projection, [q | gate | k | v]). Same structure and stash as the CPU block (model/attention_block.h); the
// normalised input and the gated output are recomputed in backward rather than kept.
#pragma once

#include <memory>

#include "moetune/model/block_params.h"
#include "moetune/model/cuda/lora_linear.h"
#include "moetune/model/cuda/mla_attention_block.h"
#include "moetune/model/cuda/step_context.h"
#include "moetune/model/cuda/sublayer_norm.h"
#include "moetune/model/model_spec.h"

namespace moetune::model::cuda {

class AttentionBlock {
 public:
  AttentionBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  // With the context's kv_cache (generation) the block runs forward_cached instead and keeps no stash.
  Tensor forward(const Tensor& h, const StepContext& context);
  Tensor backward(const Tensor& dout, const StepContext& context);
  size_t stash_bytes() const;
  // The gradients its backward pass writes whole on a step's first pass (StepContext::overwrite_gradients): the
  // projections' weight gradients (their biases' add).
  std::vector<Tensor> overwritten_gradients() const;
  void clear_stash() {
    stash_ = {};
    out_norm_.clear_stash();
    qkv_lora_.clear_stash();
    o_lora_.clear_stash();
    if (mla_) mla_->clear_stash();
  }

 private:
  int64_t window() const { return spec_.sliding_window.value_or(0); }
  // The softmax scale of q·k, the one the forward pass, its backward and the cached path (generation) all use.
  // YaRN multiplies the rotated q and k by the attention scaling m (transformers scales cos and sin); the scores
  // then carry m², which the GPU folds in here instead of scaling q and k (the same values and gradients, one
  // pass fewer; the KV cache then holds k unscaled, as the forward pass's k is).
  double scores_scale() const;
  // The gate's columns of qkv in heads (AttentionSpec::output_gate), between q's and k's; 0 without a gate.
  int64_t gate_heads() const { return spec_.output_gate ? spec_.num_heads : 0; }
  int64_t qkv_width() const { return (spec_.num_heads + gate_heads() + 2 * spec_.num_kv_heads) * spec_.qk_head_dim; }
  // o_proj's input [T, nq·d]: the attention's output, times sigmoid(gate) with an output gate (a new tensor then).
  Tensor o_input(const Tensor& attended, const Tensor& qkv) const;
  // q, k, v [T, heads, d] from the qkv projection: q/k norms (per head, or across heads) and RoPE.
  void split_qkv(const Tensor& qkv, const DeviceBatch& batch, const Tensor& q, const Tensor& k, const Tensor& v) const;
  // The factor RoPE's kernel scales the rotating pairs by: rope_attention_scaling where some pairs pass unrotated
  // (partial RoPE under longrope, whose pass-through is unscaled), else 1 (scores_scale folds it in, squared).
  double rotated_scale() const { return rotated_scale_; }
  // The new tokens' keys and values go into the cache's rows; a pass over an empty cache (the prompt) is flash
  // attention over one document, a later one attends to the whole cache (ops/cuda/decode_attention.h).
  Tensor forward_cached(const Tensor& h, const StepContext& context);

  const AttentionSpec& spec_;
  double eps_;
  float norm_offset_;  // SublayerSpec::norm_weight_offset (Gemma's 1 + weight norms)
  // RoPE, F32 [head_dim / 2] on the device (longrope's short and long); undefined without RoPE (Nemotron-H)
  ops::RopeFactorSets<Tensor> inv_freq_;
  double rotated_scale_ = 1.0;
  AttentionParams p_;
  LoraLinear qkv_lora_, o_lora_;  // LoRA adapters, if any
  OutputNorm out_norm_;           // OLMo-2's norm on o_proj's output, if any
  struct Stash {
    Tensor input;         // h [T, H]
    Tensor normed;        // rms_norm(h), where the step keeps norm outputs (StepContext::keep_outputs)
    Tensor qkv;           // the fused projection [T, (nq + gate + 2 nkv) d], before norms and rotation
    Tensor q, k, v;       // attention's inputs
    Tensor attended;      // [T, nq, d]
    Tensor softmax_stats; // flash attention's log-sum-exp
  } stash_;
  std::unique_ptr<MlaAttentionBlock> mla_;  // DeepSeek-V3's latent attention: every call goes there instead
};

}  // namespace moetune::model::cuda
