// Column sums of per-block partials, added once into a gradient. A block covers 32 columns with 8 rows of
// threads; each thread sums a strided subset of the parts, then the 8 subtotals are combined in a fixed order,
// so the result does not depend on scheduling.
#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/column_sum_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kColumns = 32;
constexpr int kPartGroups = 8;

template <typename Out>
__global__ void add_column_sums_kernel(const float* __restrict__ partial, int64_t parts, int64_t stride,
                                       int64_t width, Out* __restrict__ out) {
  gpu::wait_for_previous_kernel();
  __shared__ float subtotals[kPartGroups][kColumns];
  const int64_t column = int64_t(blockIdx.x) * kColumns + threadIdx.x;
  float sum = 0.0f;
  if (column < width)
    for (int64_t p = threadIdx.y; p < parts; p += kPartGroups) sum += partial[p * stride + column];
  subtotals[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || column >= width) return;
  float total = 0.0f;
#pragma unroll
  for (int g = 0; g < kPartGroups; ++g) total += subtotals[g][threadIdx.x];
  out[column] = from_float<Out>(to_float(out[column]) + total);
}

}  // namespace

cudaError_t launch_add_column_sums(const float* partial, int64_t parts, int64_t stride, int64_t width, void* out,
                                   bool out_is_bf16, cudaStream_t stream) {
  if (width <= 0) return cudaSuccess;
  const dim3 block(kColumns, kPartGroups);
  const dim3 grid(unsigned((width + kColumns - 1) / kColumns));
  if (out_is_bf16)
    gpu::launch_dependent(add_column_sums_kernel<bf16>, grid, block, 0, stream, partial, parts, stride, width,
                          static_cast<bf16*>(out));
  else
    gpu::launch_dependent(add_column_sums_kernel<float>, grid, block, 0, stream, partial, parts, stride, width,
                          static_cast<float*>(out));
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
