// Mamba2's recurrent step kernels (ops/cuda/mamba2_step_kernels.h): the conv from its cached window and the SSM
// recurrence from its cached state, for the few rows a generation step brings. The rows run in order inside each
// thread (conv: one channel a thread) or warp (scan: one (head, p) a warp, the lanes splitting the state), so a
// step over n rows costs n sequential updates: meant for decoding and prompts, not training.
#include <cmath>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/ops/cuda/mamba2_step_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kConvThreads = 128, kScanWarps = 4;

__device__ __forceinline__ float load_bf16(const void* p, int64_t i) {
  return to_float(static_cast<const bf16*>(p)[i]);
}
__device__ __forceinline__ float param(const void* p, bool is_bf16, int64_t i) {
  return is_bf16 ? load_bf16(p, i) : static_cast<const float*>(p)[i];
}
// torch's softplus (threshold 20), as the chunked scan.
__device__ __forceinline__ float softplus(float u) { return u > 20.0f ? u : log1pf(expf(u)); }

__global__ void __launch_bounds__(kConvThreads)
    conv_step_kernel(int64_t rows, int64_t channels, int64_t kernel, StridedBf16 xbc, const bf16* __restrict__ weight,
                     const bf16* __restrict__ bias, bf16* __restrict__ window, StridedBf16 out) {
  gpu::wait_for_previous_kernel();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  // history[k] is xbc k + 1 rows back; the window keeps the oldest first.
  float history[kMamba2MaxConvKernel] = {};
  for (int64_t k = 0; k + 1 < kernel; ++k) history[k] = to_float(window[(kernel - 2 - k) * channels + c]);
  for (int64_t n = 0; n < rows; ++n) {
    const float x = load_bf16(xbc.data, n * xbc.ld + c);
    // launch_mamba2_conv_forward's order: the bias, this row, then each earlier row.
    float acc = bias ? to_float(bias[c]) : 0.0f;
    acc += to_float(weight[c * kernel + kernel - 1]) * x;
    for (int64_t back = 1; back < kernel; ++back)
      acc += to_float(weight[c * kernel + kernel - 1 - back]) * history[back - 1];
    static_cast<bf16*>(out.data)[n * out.ld + c] =
        from_float<bf16>(acc * (1.0f / (1.0f + expf(-acc))));  // as the forward's SiLU
    for (int64_t k = kernel - 2; k > 0; --k) history[k] = history[k - 1];
    if (kernel > 1) history[0] = x;
  }
  for (int64_t k = 0; k + 1 < kernel; ++k) window[(kernel - 2 - k) * channels + c] = from_float<bf16>(history[k]);
}

__global__ void __launch_bounds__(kScanWarps * 32)
    scan_step_kernel(Mamba2ScanDims d, Mamba2ScanPointers in, float* __restrict__ state, StridedBf16 y) {
  gpu::wait_for_previous_kernel();
  const int lane = int(threadIdx.x) & 31;
  const int64_t row = int64_t(blockIdx.x) * kScanWarps + (threadIdx.x >> 5);  // (head, p)
  if (row >= d.heads * d.head_dim) return;
  const int64_t h = row / d.head_dim, g = h / (d.heads / d.groups);
  const float a = -expf(param(in.a_log, in.params_bf16, h)), bias = param(in.dt_bias, in.params_bf16, h);
  const float skip = param(in.d, in.params_bf16, h);
  float* s = state + row * d.state;
  for (int64_t n = 0; n < d.rows; ++n) {
    const float dt = fminf(fmaxf(softplus(load_bf16(in.dt.data, n * in.dt.ld + h) + bias), d.dt_min), d.dt_max);
    const float decay = expf(dt * a), x = load_bf16(in.x.data, n * in.x.ld + row);
    float dot = 0.0f;
    for (int64_t i = lane; i < d.state; i += 32) {
      const int64_t column = g * d.state + i;
      const float next = decay * s[i] + dt * load_bf16(in.b.data, n * in.b.ld + column) * x;
      s[i] = next;
      dot += next * load_bf16(in.c.data, n * in.c.ld + column);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) static_cast<bf16*>(y.data)[n * y.ld + row] = from_float<bf16>(dot + skip * x);
  }
}

}  // namespace

cudaError_t launch_mamba2_conv_step(int64_t rows, int64_t channels, int64_t kernel, StridedBf16 xbc, const void* weight,
                                    const void* bias, void* window, StridedBf16 out, cudaStream_t stream) {
  if (kernel < 1 || kernel > kMamba2MaxConvKernel) return cudaErrorInvalidValue;
  const unsigned blocks = unsigned((channels + kConvThreads - 1) / kConvThreads);
  gpu::launch_dependent(conv_step_kernel, blocks, kConvThreads, 0, stream, rows, channels, kernel, xbc,
                        static_cast<const bf16*>(weight), static_cast<const bf16*>(bias), static_cast<bf16*>(window),
                        out);
  return cudaGetLastError();
}

cudaError_t launch_mamba2_scan_step(const Mamba2ScanDims& dims, const Mamba2ScanPointers& in, float* state,
                                    StridedBf16 y, cudaStream_t stream) {
  const int64_t warps = dims.heads * dims.head_dim;
  const unsigned blocks = unsigned((warps + kScanWarps - 1) / kScanWarps);
  gpu::launch_dependent(scan_step_kernel, blocks, kScanWarps * 32, 0, stream, dims, in, state, y);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
