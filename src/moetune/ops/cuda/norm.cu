// RMSNorm forward and backward over BF16 rows, statistics in fp32. One block per row (grid-stride over rows);
// each thread owns the same kVec-wide column chunks in every row, so the backward can keep its dweight partial
// in shared memory without atomics, and an in-place dx (aliasing dy or the residual) is read before it is
// written by the same thread. kVec = 8 (16-byte loads) when the width and the pointers allow it, else 1.
#include <algorithm>
#include <initializer_list>

#include "moetune/ops/cuda/column_sum_kernels.h"
#include "moetune/ops/cuda/norm_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

// Blocks of the backward: a fixed number, not one per SM, so that the dweight summation order (and so the
// result) is the same on every GPU. Each block accumulates the rows r ≡ blockIdx (mod kBackwardBlocks).
constexpr int64_t kBackwardBlocks = 512;
// The forward needs no cross-row state; the cap only bounds gridDim.
constexpr int64_t kMaxForwardBlocks = int64_t(1) << 30;

template <int kVec>
__global__ void rms_norm_forward_kernel(const bf16* x, const bf16* __restrict__ weight, bf16* y, int64_t rows,
                                        int64_t width, float eps) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const bf16* xr = x + row * width;
    bf16* yr = y + row * width;
    float square_sum[1] = {0.0f};
    for (int64_t c = int64_t(threadIdx.x) * kVec; c < width; c += int64_t(blockDim.x) * kVec) {
      float v[kVec];
      load<kVec>(xr + c, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) square_sum[0] += v[k] * v[k];
    }
    block_sum(square_sum);
    const float rstd = 1.0f / sqrtf(square_sum[0] / float(width) + eps);
    for (int64_t c = int64_t(threadIdx.x) * kVec; c < width; c += int64_t(blockDim.x) * kVec) {
      float v[kVec], w[kVec];
      load<kVec>(xr + c, v);
      load<kVec>(weight + c, w);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = w[k] * (v[k] * rstd);
      store<kVec>(yr + c, v);
    }
  }
}

// dx = rstd·(w⊙dy) − x·rstd³·⟨w⊙dy, x⟩/width (+ residual); the block's dweight partial Σ dy⊙x·rstd lives in
// shared memory [width] and is written to partial[blockIdx.x] at the end.
template <int kVec>
__global__ void rms_norm_backward_kernel(const bf16* dy, const bf16* __restrict__ x, const bf16* __restrict__ weight,
                                         const bf16* residual, bf16* dx, float* __restrict__ partial, int64_t rows,
                                         int64_t width, float eps) {
  extern __shared__ float dweight_acc[];
  const int64_t first = int64_t(threadIdx.x) * kVec, step = int64_t(blockDim.x) * kVec;
  for (int64_t c = first; c < width; c += step)
#pragma unroll
    for (int k = 0; k < kVec; ++k) dweight_acc[c + k] = 0.0f;

  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t offset = row * width;
    float sums[2] = {0.0f, 0.0f};  // Σ x², Σ w·dy·x
    for (int64_t c = first; c < width; c += step) {
      float xv[kVec], gv[kVec], wv[kVec];
      load<kVec>(x + offset + c, xv);
      load<kVec>(dy + offset + c, gv);
      load<kVec>(weight + c, wv);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        sums[0] += xv[k] * xv[k];
        sums[1] += wv[k] * gv[k] * xv[k];
      }
    }
    block_sum(sums);
    const float rstd = 1.0f / sqrtf(sums[0] / float(width) + eps);
    const float correction = rstd * rstd * rstd * sums[1] / float(width);
    for (int64_t c = first; c < width; c += step) {
      float xv[kVec], gv[kVec], wv[kVec], rv[kVec] = {};
      load<kVec>(x + offset + c, xv);
      load<kVec>(dy + offset + c, gv);
      load<kVec>(weight + c, wv);
      if (residual != nullptr) load<kVec>(residual + offset + c, rv);
      float out[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        out[k] = rv[k] + (rstd * wv[k] * gv[k] - xv[k] * correction);
        dweight_acc[c + k] += gv[k] * xv[k] * rstd;
      }
      store<kVec>(dx + offset + c, out);
    }
  }

  float* block_partial = partial + int64_t(blockIdx.x) * width;
  for (int64_t c = first; c < width; c += step)
#pragma unroll
    for (int k = 0; k < kVec; ++k) block_partial[c + k] = dweight_acc[c + k];
}

bool vectorizable(int64_t width, std::initializer_list<const void*> pointers) {
  if (width % 8 != 0) return false;
  for (const void* p : pointers)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

int64_t backward_blocks(int64_t rows) { return std::min(rows, kBackwardBlocks); }

template <int kVec>
cudaError_t backward(const bf16* dy, const bf16* x, const bf16* weight, const bf16* residual, bf16* dx,
                     float* partial, int64_t rows, int64_t width, float eps, cudaStream_t stream) {
  const int threads = row_block_threads(width, kVec);
  const size_t shared = size_t(width) * sizeof(float);
  if (shared > 32 * 1024) {  // opt in past the default 48 KiB (block_sum adds a small static buffer)
    const cudaError_t status = cudaFuncSetAttribute(rms_norm_backward_kernel<kVec>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared));
    if (status != cudaSuccess) return status;
  }
  rms_norm_backward_kernel<kVec><<<unsigned(backward_blocks(rows)), threads, shared, stream>>>(
      dy, x, weight, residual, dx, partial, rows, width, eps);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rms_norm_forward(const void* x, const void* weight, void* y, int64_t rows, int64_t width,
                                    float eps, cudaStream_t stream) {
  if (rows == 0 || width == 0) return cudaSuccess;
  const auto* xp = static_cast<const bf16*>(x);
  const auto* wp = static_cast<const bf16*>(weight);
  auto* yp = static_cast<bf16*>(y);
  const unsigned blocks = unsigned(std::min(rows, kMaxForwardBlocks));
  if (vectorizable(width, {x, weight, y}))
    rms_norm_forward_kernel<8><<<blocks, row_block_threads(width, 8), 0, stream>>>(xp, wp, yp, rows, width, eps);
  else
    rms_norm_forward_kernel<1><<<blocks, row_block_threads(width, 1), 0, stream>>>(xp, wp, yp, rows, width, eps);
  return cudaGetLastError();
}

size_t rms_norm_backward_workspace_bytes(int64_t rows, int64_t width) {
  return size_t(backward_blocks(rows)) * size_t(width) * sizeof(float);
}

cudaError_t launch_rms_norm_backward(const void* dy, const void* x, const void* weight, const void* residual,
                                     void* dx, void* dweight, bool dweight_is_bf16, int64_t rows, int64_t width,
                                     float eps, void* workspace, cudaStream_t stream) {
  if (rows == 0 || width == 0) return cudaSuccess;
  const auto* dyp = static_cast<const bf16*>(dy);
  const auto* xp = static_cast<const bf16*>(x);
  const auto* wp = static_cast<const bf16*>(weight);
  const auto* rp = static_cast<const bf16*>(residual);
  auto* dxp = static_cast<bf16*>(dx);
  auto* partial = static_cast<float*>(workspace);
  const cudaError_t status =
      vectorizable(width, {dy, x, weight, residual, dx})
          ? backward<8>(dyp, xp, wp, rp, dxp, partial, rows, width, eps, stream)
          : backward<1>(dyp, xp, wp, rp, dxp, partial, rows, width, eps, stream);
  if (status != cudaSuccess || dweight == nullptr) return status;  // no dweight: a frozen norm
  return launch_add_column_sums(partial, backward_blocks(rows), width, width, dweight, dweight_is_bf16, stream);
}

}  // namespace moetune::ops::cuda
