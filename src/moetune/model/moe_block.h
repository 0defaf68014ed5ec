// A mixture-of-experts feed-forward sublayer: h + experts(rms_norm(h)) as router -> token dispatcher -> grouped
// SwiGLU (or relu²) experts -> combine, plus an optional shared expert (scaled by a per-token sigmoid gate when
// the spec says so). With a latent (Nemotron-H), the experts run between a projection into the latent width and
// one back. The dispatcher decides where the experts run; the block does not know.
#pragma once

#include <memory>

#include "moetune/model/block_params.h"
#include "moetune/model/lora_experts.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/step_context.h"
#include "moetune/model/sublayer_norm.h"
#include "moetune/model/swiglu_mlp.h"
#include "moetune/model/token_dispatcher.h"
#include "moetune/ops/experts.h"

namespace moetune::model {

class MoeBlock {
 public:
  MoeBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps,
           std::unique_ptr<TokenDispatcher> dispatcher);

  Tensor forward(const Tensor& h, const StepContext& context);
  // d(h), residual included; takes the aux loss's gradient for this layer's router logits from the context.
  Tensor backward(const Tensor& dout, StepContext& context);
  const ops::Routing& routing() const { return routing_; }
  // Tests: every later forward takes these choices (token t's k experts at [t·k, t·k + k)) instead of making its
  // own, with the weights its router gives them; empty restores the router's choice.
  void force_choices(std::vector<int32_t> chosen) { forced_choices_ = std::move(chosen); }
  size_t stash_bytes() const;
  void clear_stash();

 private:
  const MoeSpec& spec_;
  double eps_;
  float norm_offset_;  // SublayerSpec::norm_weight_offset (Qwen3-Next's 1 + weight norms)
  MoeParams p_;
  std::unique_ptr<TokenDispatcher> dispatcher_;
  ExpertLora expert_lora_;  // LoRA adapters on the experts, if any
  SwigluLora shared_lora_;  // and on the shared expert
  LoraLinear shared_gate_lora_;         // and on its sigmoid gate (Qwen2-MoE's shared_expert_gate, in all-linear)
  Tensor input_;                        // h, the norm's input
  ops::Routing routing_;                // logits, choices, weights
  DispatchedTokens dispatched_;         // the experts' input rows and their offsets
  ops::ExpertActivations activations_;  // pre-activation and output per dispatched row
  Tensor shared_gate_up_, shared_out_;  // the shared expert's pre-activation and output
  Tensor shared_gate_logits_;           // [T, 1]
  Param correction_bias_;               // DeepSeek-V3's e_score_correction_bias [E] (frozen); else undefined
  std::vector<int32_t> forced_choices_;  // tests only (force_choices)
  Tensor latent_combined_;              // the experts' weighted sum [T, D], latent_out's input
  OutputNorm out_norm_;                 // FlexOlmo's norm on the block's output, if any
};

}  // namespace moetune::model
