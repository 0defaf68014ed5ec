// The Mamba2 selective scan on the GPU by the chunked SSD algorithm (ops/mamba2.h semantics, the recurrence
// computed chunk by chunk): BF16 inputs and outputs read in place through ColumnBlocks, fp32 state and
// accumulation, document restarts anywhere (U8 starts [N] on the GPU), any number of rows.
#pragma once

#include <string_view>

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"
#include "moetune/ops/cuda/mamba2_scan_kernels.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops::cuda {

// x [N, H·P], dt_raw [N, H], b and c [N, G·S].
struct Mamba2ScanBlocks {
  ColumnBlock x, dt, b, c;
};

// The scan's sizes (rows from x; chunk 1) after checking the head / group / state counts, and its operands after
// checking them (x, dt, B, C through their blocks; dt_bias, A_log, D [H] of one dtype); starts left null. Shared
// by the chunked scan and generation's step (ops/cuda/mamba2_step.h).
Mamba2ScanDims checked_scan_dims(std::string_view op, const Mamba2ScanBlocks& in, const Mamba2Scan& scan);
Mamba2ScanPointers checked_scan_operands(std::string_view op, const Mamba2ScanBlocks& in,
                                         const Mamba2ScanParams& params, const Mamba2ScanDims& dims);

// y [N, H·P] (BF16) = the scan of `in` with params dt_bias, a_log, d ([H], BF16 or F32), in chunks of
// `chunk_size` rows; `starts` (U8 [N] or undefined: none) marks where documents begin. With `state` (F32
// [H, P, S]), row 0 continues that state instead of beginning a document, and `state` ends holding the state after
// the last row: generation's prompt through the chunked algorithm rather than row by row (ops/cuda/mamba2_step.h).
void mamba2_scan_forward(const Mamba2ScanBlocks& in, const Mamba2ScanParams& params, const Mamba2Scan& scan,
                         int64_t chunk_size, const Tensor& starts, const ColumnBlock& y, const Tensor& state = {});

// Given dy: writes the inputs' gradients into `grads` (dt's with respect to dt_raw) and adds the parameters'
// into `dparams` (BF16 or F32, one dtype; an undefined one is frozen). The chunk states are recomputed.
void mamba2_scan_backward(const ColumnBlock& dy, const Mamba2ScanBlocks& in, const Mamba2ScanParams& params,
                          const Mamba2Scan& scan, int64_t chunk_size, const Tensor& starts,
                          const Mamba2ScanBlocks& grads, const Mamba2ScanParams& dparams);

}  // namespace moetune::ops::cuda
