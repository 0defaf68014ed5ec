// DeepSeek-V3's multi-head latent attention (MLA) as a residual sublayer, on the CPU, as transformers 5.17's
// DeepseekV3Attention computes it:
//   x = rms_norm(h)
//   q = q_b(rms_norm(q_a(x))) or q(x), split per head into [q_nope | q_rope]
//   [c | k_rope] = kv_a(x); [k_nope | v] per head = kv_b(rms_norm(c)); k_rope is one key shared by every head
//   q_rope, k_rope rotated (interleaved or not, cos and sin times YaRN's factor)
//   h + o(attention([q_nope | q_rope], [k_nope | k_rope], v))
// Explicit forward and backward like AttentionBlock, which hands an MLA sublayer to this class.
#pragma once

#include "moetune/model/lora_linear.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/parameter_store.h"
#include "moetune/model/step_context.h"
#include "moetune/ops/mla_rope.h"

namespace moetune::model {

// The parameters, by engine name under the layer prefix. q_a* / q_b are undefined without q_lora_rank, q with
// it; the biases without attention_bias.
struct MlaParams {
  Param norm, q, q_a, q_a_bias, q_a_norm, q_b, kv_a, kv_a_bias, kv_a_norm, kv_b, o, o_bias;
  static MlaParams lookup(const ParameterStore& store, const std::string& layer, const std::string& norm);
};

class MlaAttentionBlock {
 public:
  MlaAttentionBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps);

  Tensor forward(const Tensor& h, const StepContext& context);     // the residual stream after the block
  Tensor backward(const Tensor& dout, const StepContext& context);  // d(h), residual included
  size_t stash_bytes() const;
  void clear_stash();

 private:
  struct Stash {
    Tensor input;       // h
    Tensor q_latent;    // q_a(x) before its norm [T, q_lora_rank]; undefined without q_lora_rank
    Tensor kv_latent;   // c before kv_a_layernorm [T, kv_lora_rank]
    Tensor q, k, v;     // as attention saw them [T, heads, width], zero-padded to one head width
    Tensor attended;    // [T, heads, width]
  };
  // LoRA adapters on the six projections, each empty without them (PEFT's q_proj, q_a_proj, q_b_proj,
  // kv_a_proj_with_mqa, kv_b_proj, o_proj): each adds into its projection's output before anything reads it.
  struct Adapters {
    LoraLinear q, q_a, q_b, kv_a, kv_b, o;
    static Adapters lookup(const ParameterStore& store, const std::string& layer);
    std::vector<const LoraLinear*> all() const { return {&q, &q_a, &q_b, &kv_a, &kv_b, &o}; }
  };
  Tensor project_q(const Tensor& x, const StepContext& context);
  Tensor project_q_backward(const Tensor& dq, const Tensor& x);

  const AttentionSpec& spec_;
  const MlaSpec& mla_;
  double eps_;
  int64_t width_;  // max(q/k head dim, v head dim): the one head width the CPU attention op takes
  ops::RopeFactorSets<ops::MlaRope> rope_;
  MlaParams p_;
  Adapters lora_;
  Stash stash_;
};

}  // namespace moetune::model
