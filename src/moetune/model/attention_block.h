// The attention half of a decoder layer: h + o(attention(rope(qk_norm(qkv(rms_norm(h)))))), the attention's output
// gated by sigmoid(gate) first where q_proj also gives a gate (Qwen3-Next).
// Explicit forward and backward; the stash holds what the backward pass needs and nothing else.
#pragma once

#include <memory>

#include "moetune/model/block_params.h"
#include "moetune/model/lora_linear.h"
#include "moetune/model/mla_attention_block.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/step_context.h"
#include "moetune/model/sublayer_norm.h"

namespace moetune::model {

class AttentionBlock {
 public:
  AttentionBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);     // returns the residual stream after the block
  Tensor backward(const Tensor& dout, const StepContext& context);  // d(h), residual included
  size_t stash_bytes() const;
  void clear_stash() {
    stash_ = {};
    out_norm_.clear_stash();
    qkv_lora_.clear_stash();
    o_lora_.clear_stash();
    if (mla_) mla_->clear_stash();
  }

 private:
  struct Stash {
    Tensor input;          // h, the norm's input
    Tensor q_raw, k_raw;   // q, k before their RMSNorm (Qwen3) — the norm's input
    Tensor q, k, v;        // as attention saw them (normed, rotated)
    Tensor attended;       // attention output [T, nq, d]
    Tensor gate;           // AttentionSpec::output_gate: the gate's logits [T, nq · d]
  };
  // o_proj's input [T, nq · d]: the attention's output, gated by sigmoid(gate) where the spec says.
  Tensor o_input() const;
  // q's or k's RMSNorm [T, heads, d]: over each head, or over all heads at once (qk_norm_across_heads).
  Tensor qk_norm_forward(const Tensor& x, const Tensor& weight) const;
  Tensor qk_norm_backward(const Tensor& dy, const Tensor& x, const Param& norm) const;

  const AttentionSpec& spec_;
  double eps_;
  float norm_offset_;  // SublayerSpec::norm_weight_offset (Gemma's 1 + weight norms)
  ops::RopeFactorSets<std::vector<float>> inverse_frequencies_;  // RoPE
  AttentionParams p_;
  LoraLinear qkv_lora_, o_lora_;  // LoRA adapters, if any
  OutputNorm out_norm_;           // OLMo-2's norm on o_proj's output, if any
  Stash stash_;
  std::unique_ptr<MlaAttentionBlock> mla_;  // DeepSeek-V3's latent attention: every call goes there instead
};

}  // namespace moetune::model
