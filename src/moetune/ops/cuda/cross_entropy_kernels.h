// Launchers of the cross-entropy kernels behind ops/cuda/linear_cross_entropy.cpp: raw pointers in, a CUDA
// status out. Free of the engine's host headers so that the .cu compiles without fmt.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// How each row is spread over the GPU. cluster_blocks 1: one block of 512 threads per row, which reads the row
// twice (softmax statistics, then the gradient). 2, 4 or 8: a thread-block cluster of that many blocks of
// `threads` (256 or 512) per row, each block holding its slice of the row in shared memory between the two
// passes, so the row is read once (one read, one write); rows whose slice does not fit in a block's shared
// memory fall back to one block per row. The default is the fastest measured alone on the H200 at 151936 and
// 163840 columns: 8 x 256, ~2.5% under 8 x 512 at 2048 rows in sessions 12 and 22 (0.401 / 0.384 against 0.412 /
// 0.393 ms; one block per row 0.186 against 0.155 ms at 768 rows; tests/gpu/test_cross_entropy_rows.cpp,
// docs/benchmarks.md). The block size sets the merge order, so the loss's last bits depend on it.
struct CrossEntropyLaunch {
  int cluster_blocks = 8;
  int threads = 256;
};

// For each of `rows` rows of bf16 logits [rows, vocab] (row stride vocab) with int32 targets:
//   row_losses[r] = logsumexp(logits[r]) − logits[r, target]  (fp32 softmax statistics), 0 when the target is
//   -100, NaN when it lies outside [0, vocab) (so a bad label poisons the loss instead of passing unnoticed).
// With write_grad the row is overwritten in place by grad_scale · (softmax − onehot(target)) in bf16, and by
// zeros for rows whose target is -100 or out of range.
cudaError_t launch_cross_entropy_rows(void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                      float grad_scale, bool write_grad, float* row_losses, cudaStream_t stream,
                                      CrossEntropyLaunch how = {});

// *total += Σ values[0, n), summed in double in a fixed order (deterministic), by one block.
cudaError_t launch_sum_into(const float* values, int64_t n, float* total, cudaStream_t stream);

}  // namespace moetune::ops::cuda
