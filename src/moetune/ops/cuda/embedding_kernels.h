// Launchers of the embedding lookup and its deterministic gradient (BF16 rows, I32 ids): raw pointers in, a CUDA
// status out. Free of the engine's host headers so that .cu files compile without fmt; ops/cuda/embedding.cpp
// wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace moetune::ops::cuda {

// out[t] = table[ids[t]] (BF16 [tokens, hidden]); an id outside [0, vocab) writes a row of zeros instead of
// reading outside the table (the host validates ids before upload; this only keeps a bad id from corrupting).
cudaError_t launch_embedding_forward(const int32_t* ids, const void* table, void* out, int64_t tokens, int64_t vocab,
                                     int64_t hidden, float scale, cudaStream_t stream);

// Bytes of scratch the backward needs (sort keys and values, and CUB's own temporary storage).
size_t embedding_backward_workspace_bytes(int64_t tokens, int64_t vocab);

// dtable[id] += Σ_{t: ids[t] = id} dout[t] for every id that occurs (other rows are untouched): the positions are
// sorted by id (stable radix sort), then each (id, column) is summed in fp32 in position order and added once,
// so the result is deterministic. dtable is BF16 or F32 (dtable_is_bf16); ids outside [0, vocab) are skipped, and
// so is `padding_row` (-1: none).
cudaError_t launch_embedding_backward(const void* dout, const int32_t* ids, void* dtable, bool dtable_is_bf16,
                                      int64_t tokens, int64_t vocab, int64_t hidden, int64_t padding_row, float scale,
                                      void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace moetune::ops::cuda
