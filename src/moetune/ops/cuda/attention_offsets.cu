// Document lengths and ragged offsets from cu_seqlens, one document per thread. Computed on the device so that
// building a batch never waits on the GPU and the host never reads the boundaries back.
#include <algorithm>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/attention_offsets_kernels.h"

namespace moetune::ops::cuda {
namespace {

__global__ void ragged_offsets_kernel(const int32_t* __restrict__ cu_seqlens, int64_t num_documents,
                                      int64_t padded_documents, int64_t q_row_elements, int64_t kv_row_elements,
                                      int64_t stats_row_elements, RaggedOffsets out) {
  gpu::wait_for_previous_kernel();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i <= padded_documents;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t start = cu_seqlens[i < num_documents ? i : num_documents];
    out.q_offsets[i] = start * q_row_elements;
    out.kv_offsets[i] = start * kv_row_elements;
    out.stats_offsets[i] = start * stats_row_elements;
    if (i < padded_documents) out.lengths[i] = i < num_documents ? cu_seqlens[i + 1] - cu_seqlens[i] : 0;
  }
}

}  // namespace

cudaError_t launch_ragged_offsets(const int32_t* cu_seqlens, int64_t num_documents, int64_t padded_documents,
                                  int64_t q_row_elements, int64_t kv_row_elements, int64_t stats_row_elements,
                                  RaggedOffsets out, cudaStream_t stream) {
  if (num_documents < 0 || padded_documents < num_documents) return cudaErrorInvalidValue;
  constexpr int kThreads = 128;
  const int blocks = int(std::min<int64_t>((padded_documents + 1 + kThreads - 1) / kThreads, 1024));
  gpu::launch_dependent(ragged_offsets_kernel, blocks, kThreads, 0, stream, cu_seqlens, num_documents, padded_documents,
                        q_row_elements, kv_row_elements, stats_row_elements, out);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
