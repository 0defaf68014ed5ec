// AdamW on a table's rows only when they may have a gradient, bit-identical to the eager update of the whole
// table: the input embedding, whose gradient is zero outside the rows of the step's tokens (8192 rows of
// 163840 on the Moonlight benchmark), so the eager step reads and writes 14-28 bytes of every one of its
// elements for nothing.
//
// Why it is exact: a row with a zero gradient at step s still changes under torch's AdamW (decay, both moments
// decaying, the update from the old moments), but only as a fixed function of its stored state and step s's
// constants, gradient scale and rounding key (ops/adamw_math.h, ops/cuda/adamw_elements.cuh). So a row left alone
// since step a is brought to step b by replaying steps a+1..b with a zero gradient, in registers, rounding into
// storage after each exactly as the eager kernel does (its own code: step_in_registers), and costs nothing while
// nobody reads it. The bookkeeping: the step each row is at, and the constants and gradient scale of every step
// taken (36 bytes a step).
//
// The rules of use (train/cuda/gpu_engine.cpp keeps them): catch_up before anything reads rows of the table
// (the forward pass's lookup), which also marks them for the next step; the step (adamw_step with this object)
// updates the marked rows only and zeroes their gradient rows, so nothing else may zero or write the table's
// gradient outside the marked rows; flush before anything reads the whole table or its moments (saving, the
// training state). Only the marked rows may have a nonzero gradient: a row marked and not read by a backward
// pass gets the zero-gradient step, which is exact too.
#pragma once

#include <cstdint>

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/adamw.h"

namespace moetune::ops::cuda {

struct AdamWScalars;  // ops/cuda/adamw_kernels.h
struct AdamWRows;     // ops/cuda/adamw_rows_kernels.h

class AdamWLazyRows {
 public:
  // slot: the table's state ([rows, row_length] with row_length % 8 == 0, moments not 8-bit); position: its index
  // in the list of slots adamw_step is given (the stochastic rounding's key); the state starts at step
  // `steps_taken`.
  AdamWLazyRows(const AdamWSlot& slot, size_t position, OptimizerPrecision precision, uint64_t seed,
                int64_t steps_taken = 0);

  // Marks the rows `ids` names (CUDA I32 [T]; ids outside the table are skipped) and brings them to step
  // `steps_taken` (the optimizer steps taken so far), queued on gpu::stream().
  void catch_up(const Tensor& ids, int64_t steps_taken);
  // Every row to step `steps_taken`: the whole table and its moments are then what the eager update keeps.
  void flush(int64_t steps_taken);
  // After the state was overwritten (a restored checkpoint): every row is at `steps_taken`, none marked.
  void reset(int64_t steps_taken);

  size_t position() const { return position_; }
  // I32 [rows]: nonzero for the rows marked since the last step, the only ones whose gradient may be nonzero (the
  // gradient norm reads those alone: ops/cuda/grad_norm.h's MarkedRows).
  const Tensor& marked_rows() const { return marked_; }
  const AdamWSlot& slot() const { return slot_; }
  // adamw_step's part: the step `scalars` describes on the marked rows, then none marked; norm_partials: null or
  // the table's share of adamw_step's norm partials (ops/cuda/adamw_rows_kernels.h).
  void step(const AdamWScalars& scalars, const Tensor& grad_scale, float* norm_partials);

 private:
  void reserve_history(int64_t steps);
  AdamWRows pointers() const;

  AdamWSlot slot_;
  size_t position_;
  OptimizerPrecision precision_;
  uint64_t seed_;
  int64_t rows_, row_length_;
  Tensor last_step_, marked_, marked_list_, marked_count_;  // I32 on the GPU
  Tensor history_;                                          // AdamWStepRecord bytes, for history_capacity_ steps
  int64_t history_capacity_ = 0;
};

}  // namespace moetune::ops::cuda
