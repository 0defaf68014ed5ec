// The row chunk of the fused LM head + cross-entropy on the GPU (ops/cuda/linear_cross_entropy.h): one function
// that the op and the memory plan (model/memory_plan.cpp, which compiles without CUDA) both call, so that the
// plan holds exactly the logits the op allocates.
#pragma once

#include <algorithm>
#include <cstdint>

namespace moetune::ops {

// Bytes of bf16 logits a chunk may take when the caller names no height.
inline constexpr int64_t kLmHeadChunkBudgetBytes = int64_t(256) << 20;

// The chunk height for `rows` rows and `vocab` classes: chunk_rows when given (> 0), else as many rows as
// fit in the budget, rounded down to a multiple of 256 rows (of 64 below 256 rows, from 128 on); at most `rows`;
// 0 when rows is 0. Whole 256-row blocks because cuBLASLt's tiles are 128 or 256 rows high: at 832 rows (6.5
// tiles of 128) the logits and d(hidden) GEMMs ran at ~600-630 TFLOP/s, at 768 or 1024 at ~690-720 (H200,
// docs/benchmarks.md), so 768 rows are faster than 832 and hold less.
inline int64_t lm_head_chunk_rows(int64_t rows, int64_t vocab, int64_t chunk_rows = 0) {
  if (rows <= 0) return 0;
  if (chunk_rows <= 0) {
    chunk_rows = std::max<int64_t>(1, kLmHeadChunkBudgetBytes / (vocab * 2));
    if (chunk_rows >= 256)
      chunk_rows -= chunk_rows % 256;
    else if (chunk_rows >= 128)
      chunk_rows -= chunk_rows % 64;
  }
  return std::min(chunk_rows, rows);
}

}  // namespace moetune::ops
