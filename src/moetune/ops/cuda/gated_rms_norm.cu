// The gated RMSNorm of the Mamba2 mixer and of Qwen3-Next's Gated DeltaNet: one warp per (row, group), statistics
// in fp32. The backward stores each group's 1/rms so that the weight gradient (a column sum over rows, split in a
// fixed number of parts) can recompute the normalised values without a second reduction.
//
// With p the norm's input (x ⊙ silu(z) with the gate before the norm, x after it), n = p · rstd and f the factor
// after the norm (1, or silu(z)): y = weight ⊙ n ⊙ f.
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
__device__ __forceinline__ float silu(float v) { return v * sigmoid(v); }
__device__ __forceinline__ float weight_at(const GatedRmsNormDims& d, const bf16* weight, int64_t col) {
  return to_float(weight[d.weight_per_group ? col % d.group : col]);
}
// p, what the statistics are taken over.
__device__ __forceinline__ float norm_input(const GatedRmsNormDims& d, StridedBf16 x, StridedBf16 z, int64_t row,
                                            int64_t col) {
  const float xv = at(x, row, col);
  return d.gate_after_norm ? xv : xv * silu(at(z, row, col));
}
// f, what multiplies the normalised value.
__device__ __forceinline__ float after_factor(const GatedRmsNormDims& d, StridedBf16 z, int64_t row, int64_t col) {
  return d.gate_after_norm ? silu(at(z, row, col)) : 1.0f;
}

// 1 / rms of one (row, group), summed by the calling warp.
__device__ float group_rstd(const GatedRmsNormDims& d, StridedBf16 x, StridedBf16 z, int64_t row, int64_t first) {
  float squares = 0.0f;
  for (int64_t i = threadIdx.x % 32; i < d.group; i += 32) {
    const float p = norm_input(d, x, z, row, first + i);
    squares += p * p;
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
  for (int64_t i = threadIdx.x % 32; i < d.group; i += 32) {
    const int64_t col = first + i;
    put(y, row, col, weight_at(d, weight, col) * norm_input(d, x, z, row, col) * rstd * after_factor(d, z, row, col));
  }
}

// With g = dy ⊙ weight ⊙ f: dp = rstd·(g − n·mean(g ⊙ n)), then through p = x ⊙ silu(z) (gate before the norm);
// after it, dx = dp and dz = dy ⊙ weight ⊙ n ⊙ silu'(z).
__global__ void gated_backward_kernel(GatedRmsNormDims d, StridedBf16 dy, StridedBf16 x, StridedBf16 z,
                                      const bf16* weight, StridedBf16 dx, StridedBf16 dz, float* rstd_out) {
  gpu::wait_for_previous_kernel();
  const int64_t unit = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32, groups = d.width / d.group;
  if (unit >= d.rows * groups) return;
  const int64_t row = unit / groups, first = (unit % groups) * d.group;
  const float rstd = group_rstd(d, x, z, row, first);
  float dot = 0.0f;
  for (int64_t i = threadIdx.x % 32; i < d.group; i += 32) {
    const int64_t col = first + i;
    dot += at(dy, row, col) * weight_at(d, weight, col) * after_factor(d, z, row, col) * norm_input(d, x, z, row, col) *
           rstd;
  }
  const float mean = warp_sum(dot) / float(d.group);
  for (int64_t i = threadIdx.x % 32; i < d.group; i += 32) {
    const int64_t col = first + i;
    const float xv = at(x, row, col), zv = at(z, row, col), s = sigmoid(zv);
    const float silu_slope = s * (1.0f + zv * (1.0f - s));
    const float scaled = at(dy, row, col) * weight_at(d, weight, col);
    if (d.gate_after_norm) {
      const float normed = xv * rstd, gate = zv * s;
      put(dx, row, col, rstd * (scaled * gate - normed * mean));
      put(dz, row, col, scaled * normed * silu_slope);
    } else {
      const float normed = xv * zv * s * rstd;
      const float dgated = rstd * (scaled - normed * mean);
      put(dx, row, col, dgated * zv * s);
      put(dz, row, col, dgated * xv * silu_slope);
    }
  }
  if (threadIdx.x % 32 == 0) rstd_out[unit] = rstd;
}

// Per split of rows, Σ dy ⊙ n ⊙ f per column into part[split, width]; 32 columns × 8 lanes of rows a block.
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
      acc += at(dy, row, col) * norm_input(d, x, z, row, col) * rstd[row * groups + col / d.group] *
             after_factor(d, z, row, col);
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
  // part [splits, width] is [splits · groups, group] row-major: a weight shared by the groups sums over both.
  if (d.weight_per_group)
    return launch_add_column_sums(part, kWeightGradSplits * (d.width / d.group), d.group, d.group, dweight,
                                  dweight_bf16, stream);
  return launch_add_column_sums(part, kWeightGradSplits, d.width, d.width, dweight, dweight_bf16, stream);
}

}  // namespace moetune::ops::cuda
