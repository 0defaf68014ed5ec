// The row chunk of the fused LM head + cross-entropy on the GPU (ops/cuda/linear_cross_entropy.h): one function
// that the op and the memory plan (model/memory_plan.cpp, which compiles without CUDA) both call, so that the
// plan holds exactly the logits the op allocates.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace moetune::ops {

// Bytes of bf16 logits a chunk may take when the caller names no height: 640 MiB, 2048 rows at Moonlight's
// vocabulary (163,840) and at Qwen3's (151,936: 2208 fit). Whole steps at training.lm_head_chunk_rows (H200,
// session 10, one call, 8192 tokens a micro-batch): 2048 rows against the 768 of the 256 MiB before, Moonlight's
// 4-layer cut 108,118-108,450 → 110,684 tokens/s (75.5-75.8 → 74.0 ms a step; 1024 rows 109,212, 4096 110,217,
// 8192 110,448), the reference job 113,608-115,691 → 118,660. Fewer chunks add into the [V, H] weight gradient
// fewer times (each chunk's d(W) reads and writes all of it: 671 MB on Moonlight), and d(W) with K = 2048 runs
// faster than with 768 (ops/cuda/linear_cross_entropy.cpp). Memory: up to 384 MiB more logits than before; the
// measured peak rose 0.12 GB on both jobs (24.42 → 24.54 GB, 29.74 → 29.86), whose peak is not the head's.
inline constexpr int64_t kLmHeadChunkBudgetBytes = int64_t(640) << 20;

// The chunk height for `rows` rows and `vocab` classes: chunk_rows when given (> 0), else as many rows as
// fit in the budget, rounded down to a power of two from 128 rows on; at most `rows`; 0 when rows is 0. A power
// of two because a step's rows are most often one (sequence length x micro-batch): the chunks then split them
// evenly, with no short last chunk running on an untuned GEMM at a low occupancy (DeepSeek-V3's head, 129,280 x
// 7168: 2560 rows fit, and 8192 rows ran as 3 x 2560 + 512, the 512-row chunk's GEMMs at 495-632 TFLOP/s against
// 680-730 for the others; as 4 x 2048 the head took 66.1 against 68.5 ms a step, H200, docs/benchmarks.md session 30).
// It is also a whole number of cuBLASLt's 128- or 256-row tiles: at 832 rows (6.5 tiles of 128) the logits and
// d(hidden) GEMMs ran at ~600-630 TFLOP/s, at 768 or 1024 at ~690-720 (H200, docs/benchmarks.md).
inline int64_t lm_head_chunk_rows(int64_t rows, int64_t vocab, int64_t chunk_rows = 0) {
  if (rows <= 0) return 0;
  if (chunk_rows <= 0) {
    chunk_rows = std::max<int64_t>(1, kLmHeadChunkBudgetBytes / (vocab * 2));
    if (chunk_rows >= 128) chunk_rows = int64_t(std::bit_floor(uint64_t(chunk_rows)));
  }
  return std::min(chunk_rows, rows);
}

}  // namespace moetune::ops
