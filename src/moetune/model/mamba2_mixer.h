// Nemotron-H's Mamba2 mixer on the CPU, as transformers 5.17's NemotronHMamba2Mixer computes it on its torch path
// when training: in_proj to [z | xBC | dt]; causal depthwise conv1d + SiLU over xBC; the selective scan with
// n_groups groups of B and C; the gated RMSNorm per group with z; out_proj. Padding is zeroed before in_proj and
// after the conv, as transformers does. Unlike transformers' torch path, packed documents restart the conv window
// and the SSM state (docs/families/hf-nemotron-h.md says where the two differ).
#pragma once

#include <cstdint>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/model/model_spec.h"
#include "moetune/model/sequence_layout.h"
#include "moetune/ops/mamba2.h"

namespace moetune::model {

// The mixer's tensors, HF shapes: in_proj [projection, hidden], conv [conv_channels, K], conv_bias
// [conv_channels], dt_bias / a_log / d [heads], norm [inner], out_proj [hidden, inner]; biases undefined when
// absent. As gradients, an undefined tensor is frozen.
struct Mamba2Weights {
  Tensor in_proj, in_proj_bias, conv, conv_bias, dt_bias, a_log, d, norm, out_proj, out_proj_bias;
};

// Where the recurrence restarts and which rows are padding (valid empty: none).
struct Mamba2Rows {
  ops::DocumentStarts starts;
  std::vector<uint8_t> valid;
};

// A document starts where the sequence layout starts one and at each edge between padding and tokens.
Mamba2Rows mamba2_rows(const SequenceLayout& layout);

// The causal conv + SiLU of generation's new rows `fresh_rows` [n, C], continued from conv_window (F32 [K − 1, C],
// the rows before them, oldest first), which moves on to the last row. Bias may be undefined.
Tensor causal_conv_step(const Tensor& conv_window, const Tensor& fresh_rows, const Tensor& weight, const Tensor& bias);

// What the backward pass reads: the masked input, in_proj's output, the masked conv output and the scan's.
struct Mamba2Stash {
  Tensor input, projected, conv, scan;
};

// x [N, hidden] (normed hidden states) -> [N, hidden]. Fills `stash` when given.
Tensor mamba2_mixer_forward(const Mamba2Spec& spec, const Mamba2Weights& weights, const Tensor& x,
                            const Mamba2Rows& rows, Mamba2Stash* stash);

// Generation: x [n, hidden] (the normed new rows of one sequence) -> [n, hidden], the conv continued from
// conv_window (F32 [conv_kernel − 1, conv channels], the rows of xBC before these, oldest first) and the scan from
// ssm_state (F32 [heads, head_dim, state]); both are moved on to the last row. The same sums as the forward over
// the whole sequence.
Tensor mamba2_mixer_step(const Mamba2Spec& spec, const Mamba2Weights& weights, const Tensor& x,
                         const Tensor& conv_window, const Tensor& ssm_state);

// Given dy [N, hidden]: accumulates every weight's gradient into `grads` and returns dx.
Tensor mamba2_mixer_backward(const Mamba2Spec& spec, const Mamba2Weights& weights, const Tensor& dy,
                             const Mamba2Stash& stash, const Mamba2Rows& rows, const Mamba2Weights& grads);

}  // namespace moetune::model
