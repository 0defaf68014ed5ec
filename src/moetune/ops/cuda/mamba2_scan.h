// The Mamba2 selective scan on the GPU by the chunked SSD algorithm (ops/mamba2.h semantics, the recurrence
// computed chunk by chunk): BF16 inputs and outputs read in place through ColumnBlocks, fp32 state and
// accumulation, document restarts anywhere (U8 starts [N] on the GPU), any number of rows.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops::cuda {

// x [N, H·P], dt_raw [N, H], b and c [N, G·S].
struct Mamba2ScanBlocks {
  ColumnBlock x, dt, b, c;
};

// y [N, H·P] (BF16) = the scan of `in` with params dt_bias, a_log, d ([H], BF16 or F32), in chunks of
// `chunk_size` rows.
void mamba2_scan_forward(const Mamba2ScanBlocks& in, const Mamba2ScanParams& params, const Mamba2Scan& scan,
                         int64_t chunk_size, const Tensor& starts, const ColumnBlock& y);

// Given dy: writes the inputs' gradients into `grads` (dt's with respect to dt_raw) and adds the parameters'
// into `dparams` (BF16 or F32, one dtype; an undefined one is frozen). The chunk states are recomputed.
void mamba2_scan_backward(const ColumnBlock& dy, const Mamba2ScanBlocks& in, const Mamba2ScanParams& params,
                          const Mamba2Scan& scan, int64_t chunk_size, const Tensor& starts,
                          const Mamba2ScanBlocks& grads, const Mamba2ScanParams& dparams);

}  // namespace moetune::ops::cuda
