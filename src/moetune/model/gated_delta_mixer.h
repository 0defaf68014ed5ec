// Qwen3-Next's Gated DeltaNet on the CPU, as transformers 5.17's Qwen3NextGatedDeltaNet computes it when training:
// in_proj to [q | k | v | z | b | a] (the engine's row order, model/families/decoder_parameters.h); the causal
// depthwise conv + SiLU over [q | k | v]; the gated delta rule (ops/gated_delta_rule.h: q and k L2-normed, beta =
// sigmoid(b), the decay from a, dt_bias and A_log); RMSNorm per value head times silu(z); out_proj. Padding rows are
// zeroed before in_proj as transformers does. Unlike transformers' torch path, packed documents restart the conv
// window and the recurrent state (as the Mamba2 mixer does, model/mamba2_mixer.h).
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/model/lora_linear.h"
#include "moetune/model/mamba2_mixer.h"
#include "moetune/model/model_spec.h"

namespace moetune::model {

// The mixer's tensors, HF shapes but the engine's in_proj rows: in_proj [projection, hidden], conv [conv_channels,
// K], dt_bias / a_log [Hv], norm [Dv], out_proj [hidden, value_dim]. As gradients, an undefined tensor is frozen.
struct GatedDeltaWeights {
  Tensor in_proj, conv, dt_bias, a_log, norm, out_proj;
};

// Where each part of in_proj's output [q | k | v | z | b | a] begins, the same in its gradient; the conv's output
// [q | k | v] (conv_channels wide) keeps q, k and v at the same columns. Both engines' mixers read them here.
struct GatedDeltaColumns {
  int64_t q, k, v, z, b, a;
  explicit GatedDeltaColumns(const GatedDeltaSpec& spec)
      : q(0),
        k(spec.key_dim()),
        v(2 * spec.key_dim()),
        z(spec.conv_channels()),
        b(spec.conv_channels() + spec.value_dim()),
        a(b + spec.num_v_heads) {}
};

// LoRA on in_proj's pieces and on out_proj (PEFT's adapters on in_proj_qkvz / in_proj_ba or Qwen3.5's four, and
// out_proj), each empty without; `training` and `draw` as LoraLinear::forward takes them.
struct GatedDeltaAdapters {
  LoraLinear* in_proj = nullptr;
  LoraLinear* out_proj = nullptr;
  bool training = false;
  uint64_t draw = 0;
};

// What the backward pass reads: the masked input, in_proj's output, the conv's output and the rule's.
struct GatedDeltaStash {
  Tensor input, projected, conv, core;
};

// x [N, hidden] (normed hidden states) -> [N, hidden]; `rows` as the Mamba2 mixer takes them (document starts at
// every sequence, packed document and padding edge; padding rows). Fills `stash` when given.
Tensor gated_delta_mixer_forward(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& x,
                                 const Mamba2Rows& rows, GatedDeltaStash* stash, const GatedDeltaAdapters& lora = {});

// Generation: x [n, hidden] (the normed new rows of one sequence) -> [n, hidden], the conv continued from
// conv_window (F32 [conv_kernel − 1, conv channels], the rows of [q | k | v] before these, oldest first) and the rule
// from state (F32 [Hv, Dk, Dv]); both are moved on to the last row.
Tensor gated_delta_mixer_step(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& x,
                              const Tensor& conv_window, const Tensor& state, const GatedDeltaAdapters& lora = {});

// Given dy [N, hidden]: accumulates every weight's gradient into `grads` and returns dx.
Tensor gated_delta_mixer_backward(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& dy,
                                  const GatedDeltaStash& stash, const Mamba2Rows& rows, const GatedDeltaWeights& grads,
                                  const GatedDeltaAdapters& lora = {});

}  // namespace moetune::model
