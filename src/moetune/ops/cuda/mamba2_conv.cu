// Mamba2's causal depthwise conv1d + SiLU over BF16 rows, fp32 inside. A row's window reads back at most K−1
// rows and stops at its document's start, so packed documents and padding edges restart it. The backward first
// writes d(pre-activation) to fp32 scratch (recomputing the pre-activation), then the input and weight gradients
// each read it K times.
#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/column_sum_kernels.h"
#include "moetune/ops/cuda/mamba2_conv_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kThreads = 256;
// Row splits of the weight gradient: a fixed count, so the summation order is the same on every GPU.
constexpr int64_t kWeightGradSplits = 128;
constexpr int kColumns = 32, kLanes = 8;

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__device__ __forceinline__ float load_bf16(const void* p, int64_t i) { return to_float(static_cast<const bf16*>(p)[i]); }

__device__ __forceinline__ float xbc_at(const Mamba2ConvPointers& in, int64_t n, int64_t c) {
  return load_bf16(in.xbc.data, n * in.xbc.ld + c);
}

// The conv before its SiLU at (n, c).
__device__ float preactivation(const Mamba2ConvDims& d, const Mamba2ConvPointers& in, int64_t n, int64_t c) {
  float acc = in.bias ? load_bf16(in.bias, c) : 0.0f;
  for (int64_t back = 0; back < d.kernel && back <= n; ++back) {
    const int64_t source = n - back;
    acc += load_bf16(in.weight, c * d.kernel + d.kernel - 1 - back) * xbc_at(in, source, c);
    if (in.starts[source]) break;  // the window does not reach before its document's first row
  }
  return acc;
}

// d(out)/d(pre) · dout at (n, c): 0 at padding, whose output is fixed at 0.
__device__ float preactivation_grad(const Mamba2ConvDims& d, const Mamba2ConvPointers& in, StridedBf16 dout,
                                    int64_t n, int64_t c) {
  if (in.valid && !in.valid[n]) return 0.0f;
  const float pre = preactivation(d, in, n, c), s = sigmoid(pre);
  return load_bf16(dout.data, n * dout.ld + c) * s * (1.0f + pre * (1.0f - s));
}

__global__ void conv_forward_kernel(Mamba2ConvDims d, Mamba2ConvPointers in, StridedBf16 out) {
  gpu::wait_for_previous_kernel();
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= d.rows * d.channels) return;
  const int64_t n = e / d.channels, c = e % d.channels;
  float v = 0.0f;
  if (!in.valid || in.valid[n]) {
    const float pre = preactivation(d, in, n, c);
    v = pre * sigmoid(pre);
  }
  static_cast<bf16*>(out.data)[n * out.ld + c] = from_float<bf16>(v);
}

__global__ void conv_preactivation_grad_kernel(Mamba2ConvDims d, Mamba2ConvPointers in, StridedBf16 dout,
                                               float* dpre) {
  gpu::wait_for_previous_kernel();
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= d.rows * d.channels) return;
  dpre[e] = preactivation_grad(d, in, dout, e / d.channels, e % d.channels);
}

// dxbc[s, c] = Σ over the rows n whose window holds s of dpre[n, c] · weight[c, K−1−(n−s)].
__global__ void conv_input_grad_kernel(Mamba2ConvDims d, Mamba2ConvPointers in, const float* dpre, StridedBf16 dxbc) {
  gpu::wait_for_previous_kernel();
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= d.rows * d.channels) return;
  const int64_t s = e / d.channels, c = e % d.channels;
  float acc = 0.0f;
  for (int64_t back = 0; back < d.kernel && s + back < d.rows; ++back) {
    const int64_t n = s + back;
    if (back > 0 && in.starts[n]) break;  // n and later rows start after s's document
    acc += dpre[n * d.channels + c] * load_bf16(in.weight, c * d.kernel + d.kernel - 1 - back);
  }
  static_cast<bf16*>(dxbc.data)[s * dxbc.ld + c] = from_float<bf16>(acc);
}

// Per split of rows: Σ dpre · xbc[source] per (c, k) into weight_part[split, C·K], Σ dpre into
// bias_part[split, C]. A block is 32 channels × 8 lanes of rows, combined in a fixed order.
__global__ void conv_weight_grad_kernel(Mamba2ConvDims d, Mamba2ConvPointers in, const float* dpre,
                                        float* weight_part, float* bias_part) {
  gpu::wait_for_previous_kernel();
  __shared__ float lanes[kLanes][kColumns][kMamba2MaxConvKernel + 1];
  const int64_t c = int64_t(blockIdx.x) * kColumns + threadIdx.x % kColumns;
  const int lane = threadIdx.x / kColumns;
  const int64_t per_split = (d.rows + kWeightGradSplits - 1) / kWeightGradSplits;
  const int64_t begin = blockIdx.y * per_split, end = min(begin + per_split, d.rows);
  float acc[kMamba2MaxConvKernel + 1] = {};
  if (c < d.channels) {
    for (int64_t n = begin + lane; n < end; n += kLanes) {
      const float g = dpre[n * d.channels + c];
      acc[kMamba2MaxConvKernel] += g;
      for (int64_t back = 0; back < d.kernel && back <= n; ++back) {
        const int64_t source = n - back;
#pragma unroll
        for (int k = 0; k < kMamba2MaxConvKernel; ++k)
          if (k == d.kernel - 1 - back) acc[k] += g * xbc_at(in, source, c);
        if (in.starts[source]) break;
      }
    }
  }
#pragma unroll
  for (int k = 0; k <= kMamba2MaxConvKernel; ++k) lanes[lane][threadIdx.x % kColumns][k] = acc[k];
  __syncthreads();
  if (lane != 0 || c >= d.channels) return;
  for (int64_t k = 0; k <= d.kernel; ++k) {
    const int slot = k == d.kernel ? kMamba2MaxConvKernel : int(k);
    float sum = 0.0f;
    for (int l = 0; l < kLanes; ++l) sum += lanes[l][threadIdx.x][slot];
    if (k == d.kernel) bias_part[blockIdx.y * d.channels + c] = sum;
    else weight_part[blockIdx.y * d.channels * d.kernel + c * d.kernel + k] = sum;
  }
}

__global__ void mask_rows_kernel(StridedBf16 in, StridedBf16 out, int64_t rows, int64_t width, const uint8_t* valid) {
  gpu::wait_for_previous_kernel();
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * width) return;
  const int64_t n = e / width, c = e % width;
  const bf16 v = static_cast<const bf16*>(in.data)[n * in.ld + c];
  static_cast<bf16*>(out.data)[n * out.ld + c] = valid[n] ? v : from_float<bf16>(0.0f);
}

}  // namespace

cudaError_t launch_mask_rows(StridedBf16 in, StridedBf16 out, int64_t rows, int64_t width, const uint8_t* valid,
                             cudaStream_t stream) {
  const int64_t elems = rows * width;
  if (elems == 0) return cudaSuccess;
  gpu::launch_dependent(mask_rows_kernel, unsigned((elems + kThreads - 1) / kThreads), kThreads, 0, stream, in, out,
                        rows, width, valid);
  return cudaGetLastError();
}

cudaError_t launch_mamba2_conv_forward(const Mamba2ConvDims& d, const Mamba2ConvPointers& in, StridedBf16 out,
                                       cudaStream_t stream) {
  const int64_t elems = d.rows * d.channels;
  if (elems == 0) return cudaSuccess;
  gpu::launch_dependent(conv_forward_kernel, unsigned((elems + kThreads - 1) / kThreads), kThreads, 0, stream, d, in,
                        out);
  return cudaGetLastError();
}

size_t mamba2_conv_backward_workspace_bytes(const Mamba2ConvDims& d) {
  return size_t(d.rows * d.channels + kWeightGradSplits * d.channels * (d.kernel + 1)) * sizeof(float);
}

cudaError_t launch_mamba2_conv_backward(const Mamba2ConvDims& d, const Mamba2ConvPointers& in, StridedBf16 dout,
                                        StridedBf16 dxbc, void* dweight, void* dbias, bool grads_bf16,
                                        void* workspace, cudaStream_t stream) {
  const int64_t elems = d.rows * d.channels;
  if (elems == 0) return cudaSuccess;
  auto* dpre = static_cast<float*>(workspace);
  const unsigned blocks = unsigned((elems + kThreads - 1) / kThreads);
  gpu::launch_dependent(conv_preactivation_grad_kernel, blocks, kThreads, 0, stream, d, in, dout, dpre);
  gpu::launch_dependent(conv_input_grad_kernel, blocks, kThreads, 0, stream, d, in, dpre, dxbc);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess || (!dweight && !dbias)) return status;
  float* weight_part = dpre + elems;
  float* bias_part = weight_part + kWeightGradSplits * d.channels * d.kernel;
  const dim3 grid(unsigned((d.channels + kColumns - 1) / kColumns), unsigned(kWeightGradSplits));
  gpu::launch_dependent(conv_weight_grad_kernel, grid, kColumns * kLanes, 0, stream, d, in, dpre, weight_part,
                        bias_part);
  if ((status = cudaGetLastError()) != cudaSuccess) return status;
  if (dweight && (status = launch_add_column_sums(weight_part, kWeightGradSplits, d.channels * d.kernel,
                                                  d.channels * d.kernel, dweight, grads_bf16, stream)) != cudaSuccess)
    return status;
  if (dbias)
    return launch_add_column_sums(bias_part, kWeightGradSplits, d.channels, d.channels, dbias, grads_bf16, stream);
  return cudaSuccess;
}

}  // namespace moetune::ops::cuda
