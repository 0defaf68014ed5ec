// RMSNorm forward and backward with the block's next row loaded before the current row's block_sum (session 12,
// a candidate beside norm.cu's kernels at Moonlight's 2048 wide, where the one-row kernels ran at ~2.6-2.8 TB/s):
// a thread holds its one 16-byte chunk of the current row and of the next in registers, so a block keeps loads in
// flight through its reduction. The arithmetic and the order of every sum are the one-row kernels' (the block is
// as wide as the row, one chunk a thread, block_sum over the same threads), so the bits are theirs; the backward
// visits the rows blockIdx.x + i·blocks in order and accumulates its dweight partial as they do.
#include "moetune/ops/cuda/norm_prefetch_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

constexpr int kChunk = 8;  // BF16 elements in 16 bytes
using Chunk = Pack<bf16, kChunk>;

__device__ __forceinline__ Chunk load_chunk(const bf16* p) { return *reinterpret_cast<const Chunk*>(p); }

// Rows blockIdx.x, + gridDim.x, ... (a grid of the blocks that fit the GPU at once).
__global__ void __launch_bounds__(256, 8) rms_norm_forward_prefetch_kernel(const bf16* x, const bf16* __restrict__ weight,
                                                                         bf16* y, int64_t rows, int64_t width,
                                                                         float eps) {
  const int64_t c = int64_t(threadIdx.x) * kChunk;
  const bool has_chunk = c < width;  // the block is rounded up to whole warps
  float w[kChunk] = {};
  if (has_chunk) load<kChunk>(weight + c, w);
  int64_t row = blockIdx.x;
  Chunk next{};
  if (has_chunk && row < rows) next = load_chunk(x + row * width + c);
  for (; row < rows; row += gridDim.x) {
    const Chunk current = next;
    // The next row is another block's never, this block's next: y may alias x, and this row is not written yet.
    if (has_chunk && row + gridDim.x < rows) next = load_chunk(x + (row + gridDim.x) * width + c);
    float square_sum[1] = {0.0f};
    if (has_chunk) {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const float v = to_float(current.v[k]);
        square_sum[0] += v * v;
      }
    }
    block_sum(square_sum);
    if (!has_chunk) continue;
    const float rstd = 1.0f / sqrtf(square_sum[0] / float(width) + eps);
    float v[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) v[k] = w[k] * (to_float(current.v[k]) * rstd);
    store<kChunk>(y + row * width + c, v);
  }
}

// The rows blockIdx.x + i·gridDim.x in order, as the one-row kernel; dx may alias dy or the residual (a row's
// loads come before its store, and a prefetched row is this block's next, not yet written).
__global__ void __launch_bounds__(256, 4)
    rms_norm_backward_prefetch_kernel(const bf16* dy, const bf16* __restrict__ x, const bf16* __restrict__ weight,
                                      const bf16* residual, bf16* dx, float* __restrict__ partial, int64_t rows,
                                      int64_t width, float eps) {
  const int64_t c = int64_t(threadIdx.x) * kChunk;
  const bool has_chunk = c < width;
  float wv[kChunk] = {}, dweight_acc[kChunk] = {};
  if (has_chunk) load<kChunk>(weight + c, wv);
  Chunk next_x{}, next_dy{}, next_residual{};
  const auto fetch = [&](int64_t row) {
    if (!has_chunk || row >= rows) return;
    next_x = load_chunk(x + row * width + c);
    next_dy = load_chunk(dy + row * width + c);
    if (residual != nullptr) next_residual = load_chunk(residual + row * width + c);
  };
  fetch(blockIdx.x);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const Chunk xv = next_x, gv = next_dy, rv = next_residual;
    fetch(row + gridDim.x);
    float sums[2] = {0.0f, 0.0f};  // Σ x², Σ w·dy·x
    if (has_chunk) {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const float xf = to_float(xv.v[k]), gf = to_float(gv.v[k]);
        sums[0] += xf * xf;
        sums[1] += wv[k] * gf * xf;
      }
    }
    block_sum(sums);
    if (!has_chunk) continue;
    const float rstd = 1.0f / sqrtf(sums[0] / float(width) + eps);
    const float correction = rstd * rstd * rstd * sums[1] / float(width);
    float out[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const float xf = to_float(xv.v[k]), gf = to_float(gv.v[k]);
      const float rf = residual != nullptr ? to_float(rv.v[k]) : 0.0f;
      out[k] = rf + (rstd * wv[k] * gf - xf * correction);
      dweight_acc[k] += gf * xf * rstd;
    }
    store<kChunk>(dx + row * width + c, out);
  }
  if (has_chunk) store<kChunk>(partial + int64_t(blockIdx.x) * width + c, dweight_acc);
}

}  // namespace

cudaError_t launch_rms_norm_forward_prefetch(const void* x, const void* weight, void* y, int64_t rows, int64_t width,
                                             float eps, cudaStream_t stream) {
  const int threads = row_block_threads(width, kChunk);
  int device = 0, multiprocessors = 0, per_multiprocessor = 0;
  if (cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  if (cudaError_t status = cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
      status != cudaSuccess)
    return status;
  if (cudaError_t status = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor,
                                                                         rms_norm_forward_prefetch_kernel, threads, 0);
      status != cudaSuccess)
    return status;
  const int64_t resident = int64_t(multiprocessors) * (per_multiprocessor > 0 ? per_multiprocessor : 1);
  const unsigned blocks = unsigned(rows < resident ? rows : resident);
  rms_norm_forward_prefetch_kernel<<<blocks, threads, 0, stream>>>(
      static_cast<const bf16*>(x), static_cast<const bf16*>(weight), static_cast<bf16*>(y), rows, width, eps);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_backward_prefetch(const void* dy, const void* x, const void* weight, const void* residual,
                                              void* dx, float* partial, int64_t blocks, int64_t rows, int64_t width,
                                              float eps, cudaStream_t stream) {
  rms_norm_backward_prefetch_kernel<<<unsigned(blocks), row_block_threads(width, kChunk), 0, stream>>>(
      static_cast<const bf16*>(dy), static_cast<const bf16*>(x), static_cast<const bf16*>(weight),
      static_cast<const bf16*>(residual), static_cast<bf16*>(dx), partial, rows, width, eps);
  return cudaGetLastError();
}

}  // namespace moetune::ops::cuda
