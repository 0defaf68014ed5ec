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
// 163840 columns (8 x 256 within 1%; 0.155 ms a 768-row chunk against one block per row's 0.186 at 151936;
// tests/gpu/test_cross_entropy_rows.cpp, docs/benchmarks.md).
// stages (clusters only): 1, the held kernel (a cluster per row); 2 to 4, persistent clusters streaming rows
// through that many slice buffers a block (cross_entropy_streamed.cu), the next rows' slices copied in while the
// current row is written, with the held kernel's bits; packed rows only (others, and buffers that do not fit,
// take the held kernel). Slower than the held kernel alone on the H200 (0.527 against 0.416 ms a 2048-row chunk
// at 163840 columns, session 12): not the default.
// bulk_load (clusters, stages 1, packed rows): each block's slice comes into shared memory by one bulk copy, all
// of it in flight at once, instead of by its threads' loads (four packs a thread, then the rest); the same bits.
// early_copy (with bulk_load): the copy starts before the row's target is read, so that the target's load is
// not on the block's path; a row that turns out ignored has then been read for nothing.
struct CrossEntropyLaunch {
  int cluster_blocks = 8;
  int threads = 512;
  int stages = 1;
  bool bulk_load = true;
  bool early_copy = false;
};

// For each of `rows` rows of bf16 logits [rows, vocab] (row stride vocab) with int32 targets:
//   row_losses[r] = logsumexp(logits[r]) − logits[r, target]  (fp32 softmax statistics), 0 when the target is
//   -100, NaN when it lies outside [0, vocab) (so a bad label poisons the loss instead of passing unnoticed).
// With write_grad the row is overwritten in place by grad_scale · (softmax − onehot(target)) in bf16, and by
// zeros for rows whose target is -100 or out of range.
cudaError_t launch_cross_entropy_rows(void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                      float grad_scale, bool write_grad, float* row_losses, cudaStream_t stream,
                                      CrossEntropyLaunch how = {});

// The streamed kernel alone (cross_entropy_streamed.cu; launch_cross_entropy_rows tries it first for packed rows
// when how.stages > 1), for tests that must know it ran. Rows must be 16-byte aligned multiples of 8 values
// (cudaErrorInvalidValue otherwise); cudaErrorNotSupported when the buffers do not fit one block's shared memory
// or no cluster of them fits the device (launch_cross_entropy_rows then runs the held kernel).
cudaError_t launch_cross_entropy_streamed_rows(void* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                                               float grad_scale, bool write_grad, float* row_losses,
                                               cudaStream_t stream, CrossEntropyLaunch how);

// *total += Σ values[0, n), summed in double in a fixed order (deterministic), by one block.
cudaError_t launch_sum_into(const float* values, int64_t n, float* total, cudaStream_t stream);

}  // namespace moetune::ops::cuda
