// The Gated DeltaNet recurrence on the GPU (ops/gated_delta_rule.h semantics, the CPU op its oracle): BF16 inputs
// and outputs read in place through ColumnBlocks, fp32 state and accumulation, document restarts anywhere (U8
// starts [N] on the GPU), any number of rows, head dims up to 256 (kGatedDeltaMaxHeadDim).
#pragma once

#include <cstdint>
#include <span>

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"
#include "moetune/ops/cuda/gated_delta_rule_kernels.h"
#include "moetune/ops/gated_delta_rule.h"

namespace moetune::ops::cuda {

// q, k [N, Hk·Dk] and v [N, Hv·Dv]: column blocks of the conv's output; a, b [N, Hv]: of in_proj's output.
struct GatedDeltaBlocks {
  ColumnBlock q, k, v, a, b;
};

// out [N, Hv·Dv] (BF16) = the recurrence of `in` with dt_bias and a_log ([Hv], BF16 or F32, one dtype); `starts`
// (U8 [N] or undefined: none) marks where documents begin. With `state` (F32 [Hv, Dk, Dv]), row 0 continues it
// unless starts[0], and `state` ends holding the state after the last row (generation's prompt); without it, row 0
// starts from zeros. `split_rows`: rows where `starts` is set (any of them, ascending; the host's copy of the flags,
// document_start_rows), at which the kernels may run the recurrence's spans side by side (GatedDeltaSplits).
void gated_delta_rule_forward(const GatedDeltaBlocks& in, const Tensor& dt_bias, const Tensor& a_log,
                              const GatedDeltaShape& shape, const Tensor& starts, const ColumnBlock& out,
                              const Tensor& state = {}, std::span<const int64_t> split_rows = {});

// Given dout [N, Hv·Dv]: writes the inputs' gradients into `grads` (BF16; q's and k's through the l2norm, summed over
// the value heads sharing a key head) and adds dt_bias's and A_log's into d_dt_bias and d_a_log ([Hv], BF16 or F32,
// one dtype; undefined: frozen). Row 0 starts from zeros. Deterministic: two calls give the same bits.
void gated_delta_rule_backward(const ColumnBlock& dout, const GatedDeltaBlocks& in, const Tensor& dt_bias,
                               const Tensor& a_log, const GatedDeltaShape& shape, const Tensor& starts,
                               const GatedDeltaBlocks& grads, const Tensor& d_dt_bias, const Tensor& d_a_log,
                               std::span<const int64_t> split_rows = {});

}  // namespace moetune::ops::cuda
