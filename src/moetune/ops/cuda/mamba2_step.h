// Mamba2's mixer one generation step at a time on the GPU: the causal conv and the selective scan continued from a
// cache (a conv window and an SSM state per layer) over a few new rows of one sequence, instead of rerunning them
// over the whole sequence. ops/mamba2.h's semantics: the recurrence the chunked scan (ops/cuda/mamba2_scan.h)
// computes by chunks, here row after row (for a token at a time; a prompt's rows go through the chunked scan, which
// takes and leaves the same state: mamba2_scan_forward's `state`).
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"
#include "moetune/ops/cuda/mamba2_scan.h"

namespace moetune::ops::cuda {

// out [n, C] = silu(conv(xbc)) over n new rows, the K − 1 rows before them read from `window` (BF16 [K − 1, C],
// oldest first; zeros before the sequence's start), which is then overwritten with the last K − 1 rows of the
// sequence. weight [C, K], bias [C] or undefined, BF16.
void mamba2_conv_step(const ColumnBlock& xbc, const Tensor& weight, const Tensor& bias, const Tensor& window,
                      const ColumnBlock& out);

// y [n, H·P] (BF16) = the scan of `in` over n new rows starting from `state` (F32 [H, P, S]; zeros at the
// sequence's start), which then holds the state after the last row.
void mamba2_scan_step(const Mamba2ScanBlocks& in, const Mamba2ScanParams& params, const Mamba2Scan& scan,
                      const Tensor& state, const ColumnBlock& y);

}  // namespace moetune::ops::cuda
