// Launcher of the kernel that turns a packed batch's document boundaries into what cuDNN's ragged (THD) attention
// reads: per-document lengths and per-document element offsets into Q/O, K/V and the softmax statistics.
// Free of the engine's host headers so that the .cu file compiles without fmt; ops/cuda/attention.cpp calls it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

struct RaggedOffsets {
  int32_t* lengths;        // [padded_documents]
  int64_t* q_offsets;      // [padded_documents + 1], in elements of a [T, heads, head_dim] tensor
  int64_t* kv_offsets;     // [padded_documents + 1], in elements of a [T, kv_heads, head_dim] tensor
  int64_t* stats_offsets;  // [padded_documents + 1], in elements of the [T, heads] statistics
};

// cu_seqlens [num_documents + 1] on the device. Documents past num_documents (up to padded_documents) get length 0
// and start at the end, so that one cuDNN graph built for padded_documents serves every smaller count.
cudaError_t launch_ragged_offsets(const int32_t* cu_seqlens, int64_t num_documents, int64_t padded_documents,
                                  int64_t q_row_elements, int64_t kv_row_elements, int64_t stats_row_elements,
                                  RaggedOffsets out, cudaStream_t stream);

}  // namespace moetune::ops::cuda
