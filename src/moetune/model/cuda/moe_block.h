// A mixture-of-experts sublayer on the GPU: router -> token dispatcher -> grouped experts -> combine, added to h
// (FlexOlmo: its input not normed, its output normed before the add, model/cuda/sublayer_norm.h).
// The router gives fp32 logits and the softmax top-k in one kernel; the dispatcher (model/cuda/token_dispatcher.h)
// puts the rows in expert-major order for two grouped GEMMs with SwiGLU (or relu², Nemotron-H) between; an
// optional shared expert (with its sigmoid gate) is added on top. With a latent (Nemotron-H's moe_latent_size)
// the experts run between a dense projection into the latent width and one back. Nothing is read back to the
// host: expert counts stay on the device.
#pragma once

#include <memory>
#include <vector>

#include "moetune/model/block_params.h"
#include "moetune/model/cuda/lora_experts.h"
#include "moetune/model/cuda/lora_linear.h"
#include "moetune/model/cuda/step_context.h"
#include "moetune/model/cuda/sublayer_norm.h"
#include "moetune/model/cuda/token_dispatcher.h"
#include "moetune/model/model_spec.h"

namespace moetune::model::cuda {

class MoeBlock {
 public:
  MoeBlock(const ParameterStore& store, const std::string& layer, const SublayerSpec& sublayer, double norm_eps,
           std::unique_ptr<TokenDispatcher> dispatcher);

  // Adds this layer's counts into the context's aux-loss sums when they are defined. Per-layer counts are kept
  // for telemetry. One token of a generation (the context's kv_cache) runs forward_one_token where it can
  // (runs_one_token).
  Tensor forward(const Tensor& h, const StepContext& context);
  // The context's aux_scale ≠ 0 adds the aux loss's gradient (counts over all layers, aux_rows rows) to the
  // router logits' gradient.
  Tensor backward(const Tensor& dout, const StepContext& context);
  // This layer's top-k counts per expert from the last forward (F32 [E] on the device).
  const Tensor& layer_counts() const { return layer_counts_; }
  // The last forward's choices, I32 [T, k] on the device, while its stash is held.
  const Tensor& expert_ids() const { return expert_ids_; }
  size_t stash_bytes() const;
  void clear_stash();
  // The gradients the backward pass writes whole, not adds to, on a step's first micro-batch
  // (StepContext::overwrite_gradients): the experts' weight gradients, unless padded, and the router's, the shared
  // expert's and its gate's, and the latent projections' weight gradients.
  std::vector<Tensor> overwritten_gradients() const;

 private:
  // The experts' up (gate_up) and down weights as the grouped GEMMs take them: the parameters, or their padded
  // copies (model/cuda/padded_experts.h) for relu² experts whose width is not a multiple of 8.
  std::pair<Tensor, Tensor> expert_weights() const;
  // The experts' weight gradients (accumulated into the parameters', cut back from the padded width if padded;
  // written instead when `overwrite`: StepContext::overwrite_gradients).
  void add_gate_up_weight_grad(const Tensor& dgate_up, bool overwrite, ExpertNormPartials* norms) const;
  void add_down_weight_grad(const Tensor& dexpert_out, const Tensor& activated, bool overwrite,
                            ExpertNormPartials* norms) const;
  // rows [R, N] += bias[e] per expert group (GPT-OSS); nothing when the bias is absent.
  void add_expert_bias(const Param& bias, const Tensor& rows) const;
  // Generation's decode step: the router, then matrix-vector products over the chosen experts' rows
  // (ops/cuda/expert_gemv.h) instead of dispatch, grouped GEMMs and combine; keeps no stash or statistics.
  Tensor forward_one_token(const Tensor& h);
  // Whether forward_one_token computes this layer's forward: it implements every router (route_tokens), SwiGLU
  // or relu² experts without biases or LoRA, in the hidden width or a latent one (Nemotron-H's latent_in /
  // latent_out), on one rank's whole set of experts, and an optional plain shared expert (and sigmoid gate) without
  // LoRA. The rest (GPT-OSS's expert biases and clamped SwiGLU, expert adapters) runs the forward.
  bool runs_one_token() const;
  // The router's logits F32 [T, E] from the normed rows, and its choice: expert_ids I32 [T, k] and weights F32
  // [T, k] (softmax then top-k, top-k then softmax, or the sigmoid group-limited router with its correction bias).
  Tensor router_logits(const Tensor& normed) const;
  void route_tokens(const Tensor& logits, const Tensor& expert_ids, const Tensor& weights) const;
  Tensor correction_bias_f32() const;  // the router's correction bias as the GPU routers read it (F32 [E])

  const MoeSpec& spec_;
  double eps_;
  float norm_offset_;  // SublayerSpec::norm_weight_offset: Qwen3-Next's input norm scales by 1 + weight
  MoeParams p_;
  std::unique_ptr<TokenDispatcher> dispatcher_;
  Param correction_bias_;    // DeepSeek-V3's sigmoid router: a frozen buffer, read for the choice only
  ExpertLora expert_lora_;  // LoRA adapters on the experts, if any
  SwigluLora shared_lora_;  // and on the shared expert
  LoraLinear shared_gate_lora_;  // and on its sigmoid gate (Qwen2-MoE's shared_expert_gate: all-linear takes it)
  Tensor input_;             // h
  Tensor normed_;            // rms_norm(h) (h without an input norm), kept for the router's, shared expert's and
                             // latent's backward
  OutputNorm out_norm_;      // FlexOlmo's norm on the sublayer's output, if any
  Tensor logits_;            // F32 [T, E]
  Tensor expert_ids_;        // I32 [T, k]
  Tensor weights_;           // F32 [T, k]
  DispatchedTokens dispatched_;  // the experts' input rows [R, H] and offsets
  Tensor gate_up_out_;       // [T k, 2 I] (relu²: [T k, I])
  Tensor activation_;        // [T k, I], where the step keeps it (model/recompute.h keeps_activation)
  Tensor expert_out_;        // [T k, D] (D: the latent width, else H)
  Tensor latent_combined_;   // with a latent: the experts' weighted sum [T, D], latent_out's input
  Tensor shared_gate_up_;    // the shared expert's pre-activation [T, 2 Is]
  Tensor shared_activation_;  // its activation [T, Is], where kept
  Tensor shared_out_;        // its output [T, H], read by the gate's backward
  Tensor shared_gate_logits_;  // F32 [T, 1]
  Tensor layer_counts_, layer_prob_sums_;
  int64_t padded_width_ = 0;       // relu² experts run at this width (a multiple of 8); 0: unpadded
  Tensor up_padded_, down_padded_;  // their padded weights, from the forward to the backward (not a stash)
};

}  // namespace moetune::model::cuda
