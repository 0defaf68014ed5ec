// The gated RMSNorm of the Mamba2 mixer: one warp per (row, group), statistics in fp32. The backward stores each
// group's 1/rms so that the weight gradient (a column sum over rows, split in a fixed number of parts) can
// recompute the normalised values without a second reduction.
#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/column_sum_kernels.h"
#include "moetune/ops/cuda/gated_rms_norm_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int64_t kWeightGradSplits = 128;
constexpr int kColumns = 32, kLanes = 8;

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
__device__ __forceinline__ float at(StridedBf16 m, int64_t row, int64_t col) {
  return to_float(static_cast<const bf16*>(m.data)[row * m.ld + col]);
}
__device__ __forceinline__ void put(StridedBf16 m, int64_t row, int64_t col, float v) {
  static_cast<bf16*>(m.data)[row * m.ld + col] = from_float<bf16>(v);
}
__device__ __forceinline__ float gated(StridedBf16 x, StridedBf16 z, int64_t row, int64_t col) {
  const float zv = at(z, row, col);
  return at(x, row, col) * zv * sigmoid(zv);
}

// 1 / rms of one (row, group), summed by the calling warp.
__device__ float group_rstd(const GatedRmsNormDims& d, StridedBf16 x, StridedBf16 z, int64_t row, int64_t first) {
  float squares = 0.0f;
  for (int64_t i = threadIdx.x % 32; i < d.group; i += 32) {
    const float g = gated(x, z, row, first + i);
    squares += g * g;
  }
  return rsqrtf(warp_sum(squares) / float(d.group) + d.eps);
}

__global__ void gated_forward_kernel(GatedRmsNormDims d, StridedBf16 x, StridedBf16 z, const bf16* weight,
                                     StridedBf16 y) {
  gpu::wait_for_previous_kernel();
  const int64_t unit = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32, groups = d.width / d.group;
  if (unit >= d.rows * groups) return;
  const int64_t row = unit / groups, first = (unit % groups) * d.group;
  const float rstd = group_rstd(d, x, z, row, first);
  for (int64_t i = threadIdx.x % 32; i < d.group; i += 32)
    put(y, row, first + i, to_float(weight[first + i]) * gated(x, z, row, first + i) * rstd);
}

// With n = gated·rstd and g = dy ⊙ weight: d gated = rstd·(g − n·mean(g ⊙ n)), then through x ⊙ silu(z).
__global__ void gated_backward_kernel(GatedRmsNormDims d, StridedBf16 dy, StridedBf16 x, StridedBf16 z,
                                      const bf16* weight, StridedBf16 dx, StridedBf16 dz, float* rstd_out) {
  gpu::wait_for_previous_kernel();
  const int64_t unit = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32, groups = d.width / d.group;
  if (unit >= d.rows * groups) return;
  const int64_t row = unit / groups, first = (unit % groups) * d.group;
  const float rstd = group_rstd(d, x, z, row, first);
  float dot = 0.0f;
  for (int64_t i = threadIdx.x % 32; i < d.group; i += 32)
    dot += at(dy, row, first + i) * to_float(weight[first + i]) * gated(x, z, row, first + i) * rstd;
  const float mean = warp_sum(dot) / float(d.group);
  for (int64_t i = threadIdx.x % 32; i < d.group; i += 32) {
    const int64_t col = first + i;
    const float xv = at(x, row, col), zv = at(z, row, col), s = sigmoid(zv);
    const float normed = xv * zv * s * rstd;
    const float dgated = rstd * (at(dy, row, col) * to_float(weight[col]) - normed * mean);
    put(dx, row, col, dgated * zv * s);
    put(dz, row, col, dgated * xv * s * (1.0f + zv * (1.0f - s)));
  }
  if (threadIdx.x % 32 == 0) rstd_out[unit] = rstd;
}

// Per split of rows, Σ dy ⊙ normed per column into part[split, width]; 32 columns × 8 lanes of rows a block.
__global__ void gated_weight_grad_kernel(GatedRmsNormDims d, StridedBf16 dy, StridedBf16 x, StridedBf16 z,
                                         const float* rstd, float* part) {
  gpu::wait_for_previous_kernel();
  __shared__ float lanes[kLanes][kColumns];
  const int64_t col = int64_t(blockIdx.x) * kColumns + threadIdx.x % kColumns;
  const int lane = threadIdx.x / kColumns;
  const int64_t per_split = (d.rows + kWeightGradSplits - 1) / kWeightGradSplits;
  const int64_t begin = blockIdx.y * per_split, end = min(begin + per_split, d.rows), groups = d.width / d.group;
  float acc = 0.0f;
  if (col < d.width)
    for (int64_t row = begin + lane; row < end; row += kLanes)
      acc += at(dy, row, col) * gated(x, z, row, col) * rstd[row * groups + col / d.group];
  lanes[lane][threadIdx.x % kColumns] = acc;
  __syncthreads();
  if (lane != 0 || col >= d.width) return;
  float sum = 0.0f;
  for (int l = 0; l < kLanes; ++l) sum += lanes[l][threadIdx.x];
  part[blockIdx.y * d.width + col] = sum;
}

}  // namespace

cudaError_t launch_gated_rms_norm_forward(const GatedRmsNormDims& d, StridedBf16 x, StridedBf16 z,
                                          const void* weight, StridedBf16 y, cudaStream_t stream) {
  const int64_t units = d.rows * (d.width / d.group);
  if (units == 0) return cudaSuccess;
  gpu::launch_dependent(gated_forward_kernel, unsigned((units + kWarps - 1) / kWarps), kThreads, 0, stream, d, x, z,
                        static_cast<const bf16*>(weight), y);
  return cudaGetLastError();
}

size_t gated_rms_norm_backward_workspace_bytes(const GatedRmsNormDims& d) {
  return size_t(d.rows * (d.width / d.group) + kWeightGradSplits * d.width) * sizeof(float);
}

cudaError_t launch_gated_rms_norm_backward(const GatedRmsNormDims& d, StridedBf16 dy, StridedBf16 x,
                                           StridedBf16 z, const void* weight, StridedBf16 dx, StridedBf16 dz,
                                           void* dweight, bool dweight_bf16, void* workspace, cudaStream_t stream) {
  const int64_t units = d.rows * (d.width / d.group);
  if (units == 0) return cudaSuccess;
  auto* rstd = static_cast<float*>(workspace);
  float* part = rstd + units;
  gpu::launch_dependent(gated_backward_kernel, unsigned((units + kWarps - 1) / kWarps), kThreads, 0, stream, d, dy, x,
                        z, static_cast<const bf16*>(weight), dx, dz, rstd);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess || !dweight) return status;
  const dim3 grid(unsigned((d.width + kColumns - 1) / kColumns), unsigned(kWeightGradSplits));
  gpu::launch_dependent(gated_weight_grad_kernel, grid, kColumns * kLanes, 0, stream, d, dy, x, z, rstd, part);
  if ((status = cudaGetLastError()) != cudaSuccess) return status;
  return launch_add_column_sums(part, kWeightGradSplits, d.width, d.width, dweight, dweight_bf16, stream);
}

}  // namespace moetune::ops::cuda
