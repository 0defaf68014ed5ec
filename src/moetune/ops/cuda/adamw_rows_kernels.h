// Launchers of the lazy row-wise AdamW kernels (adamw_rows.cu): raw pointers in, a CUDA status out. The
// Tensor-level owner of the bookkeeping is ops/cuda/adamw_rows.h, which says what the update is and why it is
// exact.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moetune/ops/cuda/adamw_kernels.h"

namespace moetune::ops::cuda {

// What eager AdamW used at one step: its constants and the gradient scale (the clip coefficient, or 1), which a
// row that missed the step replays with a zero gradient.
struct AdamWStepRecord {
  AdamWConstants constants;
  float grad_scale;
};

// A [rows, row_length] table updated lazily, and its bookkeeping (device pointers).
struct AdamWRows {
  AdamWTensorPointers table;  // param, grad (read), moments, master: as the eager kernel takes them
  uint16_t* grad;             // the same gradient, which the step zeroes in the rows it updates
  int64_t rows, row_length;   // row_length % 8 == 0
  int32_t* last_step;         // [rows]: the step each row's state is at (0: as loaded)
  int32_t* marked;            // [rows]: 1 for a row read since the last step (its gradient may be nonzero)
  int32_t* marked_list;       // [rows]: the marked rows, in the order they were marked
  int32_t* marked_count;      // [1]: how many
  AdamWStepRecord* history;   // [steps + 1]: history[s] for each step s taken so far
  uint64_t seed;              // the stochastic rounding's (AdamWScalars::seed)
  int64_t position;           // the table's position in the step's list of tensors (stochastic rounding's key)
};

// Marks the rows `ids` names (ids outside [0, rows) are skipped), appends the ones not marked yet to the list, and
// brings those to step `step` (replaying each step they missed with a zero gradient).
cudaError_t launch_adamw_rows_catch_up(AdamWStorage storage, const AdamWRows& rows, const int32_t* ids,
                                       int64_t tokens, int32_t step, cudaStream_t stream);

// The step scalars.step on the marked rows, exactly as launch_adamw updates them (first bringing a row to the
// step before, should it lag), zeroing their gradients; records the step in history. norm_partials: null, or the
// table's share of launch_adamw's partials (the layout that launch over the table alone would write: the Σ g²
// of each warp's elements of each chunk, unmarked rows contributing their zero gradients). Then unmarks the rows
// and sets their last_step.
cudaError_t launch_adamw_rows_step(AdamWStorage storage, const AdamWRows& rows, const AdamWScalars& scalars,
                                   const float* grad_scale, float* norm_partials, cudaStream_t stream);

// Brings every row to step `step`.
cudaError_t launch_adamw_rows_flush(AdamWStorage storage, const AdamWRows& rows, int32_t step, cudaStream_t stream);

}  // namespace moetune::ops::cuda
