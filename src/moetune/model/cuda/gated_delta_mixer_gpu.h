// Qwen3-Next's and Qwen3.5's Gated DeltaNet mixer on the GPU, the twin of model/gated_delta_mixer.h (same
// GatedDeltaSpec, GatedDeltaWeights and semantics): in_proj and out_proj through cuBLASLt with their LoRA adapters,
// the causal conv + SiLU (Mamba2's kernel: the same depthwise conv without a bias), the gated delta rule
// (ops/cuda/gated_delta_rule.h) reading q, k, v inside the conv's output and a, b inside in_proj's, and the
// norm-then-gate RMSNorm per value head reading z inside in_proj's output. BF16 activations and weights, fp32
// inside the kernels.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/model/cuda/lora_linear.h"
#include "moetune/model/cuda/mamba2_mixer_gpu.h"
#include "moetune/model/gated_delta_mixer.h"

namespace moetune::model::cuda {

// What the backward pass reads (BF16): the masked input [N, hidden], in_proj's output [N, projection], the conv's
// [N, conv channels] and the rule's [N, Hv·Dv]. The gated norm's output is recomputed.
struct GatedDeltaGpuStash {
  Tensor input, projected, conv, core;
};

// The adapters on in_proj and out_proj (empty ones cost nothing) and the pass they run in.
struct GatedDeltaGpuAdapters {
  LoraLinear* in_proj = nullptr;
  LoraLinear* out_proj = nullptr;
  LoraPass pass;
};

// x [N, hidden] (normed hidden states) -> [N, hidden]; the conv and the rule restart at `rows`' document starts and
// padding rows are zeroed. Fills `stash` when given.
Tensor gated_delta_mixer_forward_gpu(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& x,
                                     const Mamba2GpuRows& rows, GatedDeltaGpuStash* stash,
                                     const GatedDeltaGpuAdapters& lora);

// Generation: x [n, hidden] (the normed new rows of one sequence) -> [n, hidden], the conv and the rule continued
// from conv_window (BF16 [conv_kernel − 1, conv channels]) and state (F32 [Hv, Dk, Dv]), both moved on to the last
// row.
Tensor gated_delta_mixer_step_gpu(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& x,
                                  const Tensor& conv_window, const Tensor& state, const GatedDeltaGpuAdapters& lora);

// Given dy [N, hidden]: accumulates every defined gradient in `grads` (and the adapters') and returns dx [N, hidden].
Tensor gated_delta_mixer_backward_gpu(const GatedDeltaSpec& spec, const GatedDeltaWeights& weights, const Tensor& dy,
                                      const GatedDeltaGpuStash& stash, const Mamba2GpuRows& rows,
                                      const GatedDeltaWeights& grads, const GatedDeltaGpuAdapters& lora);

}  // namespace moetune::model::cuda
