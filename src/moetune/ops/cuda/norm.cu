// RMSNorm forward and backward over BF16 rows, statistics in fp32. Two kernel shapes, with the same arithmetic in
// the same order (so the same bits):
// - rows in registers (aligned rows of at most 512 elements by default, where it was measured faster; the tests
//   run it up to kMaxRegisterChunks 16-byte chunks): the block is as wide as the row, each thread holds one chunk
//   of kRows rows at once, so a row is read from memory once, the kRows rows' sums share one block_sum, and a
//   thread has kRows (backward: 3·kRows) 16-byte loads in flight instead of one.
// - one row per pass (every other row): one block per row (grid-stride over rows), each thread owning
//   the same kVec-wide column chunks in every row, reading the row twice (the second time mostly from cache).
// In both, a thread owns the same columns in every row, so the backward keeps its dweight partial (registers, or
// shared memory [width]) without atomics, and an in-place dx (aliasing dy or the residual) is read before it is
// written by the same thread. kVec = 8 (16-byte loads) when the width and the pointers allow it, else 1.
#include <algorithm>
#include <initializer_list>

#include "moetune/core/dependent_launch.cuh"
#include "moetune/core/shared_memory_opt_in.h"
#include "moetune/ops/cuda/column_sum_kernels.h"
#include "moetune/ops/cuda/norm_kernel_choice.h"
#include "moetune/ops/cuda/norm_kernels.h"
#include "moetune/ops/cuda/pointwise_common.cuh"

namespace moetune::ops::cuda {
namespace {

using namespace pointwise;

// Blocks of the backward: a fixed number, not one per SM, so that the dweight summation order (and so the
// result) is the same on every GPU. Each block accumulates the rows r ≡ blockIdx (mod kBackwardBlocks).
// 768: the one-row kernel at width 2048 (40 registers, 256 threads) fits 6 blocks an SM, 792 on an H200, so 768
// run in one wave with ~1.5 times the loads in flight of 512 (~4 an SM). H200, session 24, [8192, 2048] with the
// column sums: 51.7 -> 47.3 us with a residual, 44.2 -> 42.5 without (1024: 49.6 without, a second wave; 2048:
// 57.3 / 63.5).
constexpr int64_t kBackwardBlocks = 768;
// The forward needs no cross-row state; the cap only bounds gridDim.
constexpr int64_t kMaxForwardBlocks = int64_t(1) << 30;

// The norm's scale: offset + weight in fp32 (Gemma's 1 + weight; offset 0 elsewhere, exact).
template <int kVec>
__device__ __forceinline__ void load_weight(const bf16* weight, float offset, float (&w)[kVec]) {
  load<kVec>(weight, w);
#pragma unroll
  for (int k = 0; k < kVec; ++k) w[k] += offset;
}

// Strides of 0 are the width: packed rows.
RowStrides packed_if_unset(RowStrides strides, int64_t width) {
  return {strides.x != 0 ? strides.x : width, strides.out != 0 ? strides.out : width};
}

template <int kVec>
__global__ void rms_norm_forward_kernel(const bf16* x, const bf16* __restrict__ weight, bf16* y, int64_t rows,
                                        int64_t width, float eps, RowStrides strides, float weight_offset) {
  gpu::wait_for_previous_kernel();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const bf16* xr = x + row * strides.x;
    bf16* yr = y + row * strides.out;
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
      load_weight<kVec>(weight + c, weight_offset, w);
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
                                         int64_t width, float eps, RowStrides strides, float weight_offset) {
  gpu::wait_for_previous_kernel();
  extern __shared__ float dweight_acc[];
  const int64_t first = int64_t(threadIdx.x) * kVec, step = int64_t(blockDim.x) * kVec;
  for (int64_t c = first; c < width; c += step)
#pragma unroll
    for (int k = 0; k < kVec; ++k) dweight_acc[c + k] = 0.0f;

  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t offset = row * width, x_offset = row * strides.x, out_offset = row * strides.out;
    float sums[2] = {0.0f, 0.0f};  // Σ x², Σ w·dy·x
    for (int64_t c = first; c < width; c += step) {
      float xv[kVec], gv[kVec], wv[kVec];
      load<kVec>(x + x_offset + c, xv);
      load<kVec>(dy + offset + c, gv);
      load_weight<kVec>(weight + c, weight_offset, wv);
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
      load<kVec>(x + x_offset + c, xv);
      load<kVec>(dy + offset + c, gv);
      load_weight<kVec>(weight + c, weight_offset, wv);
      if (residual != nullptr) load<kVec>(residual + out_offset + c, rv);
      float out[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        out[k] = rv[k] + (rstd * wv[k] * gv[k] - xv[k] * correction);
        dweight_acc[c + k] += gv[k] * xv[k] * rstd;
      }
      store<kVec>(dx + out_offset + c, out);
    }
  }

  float* block_partial = partial + int64_t(blockIdx.x) * width;
  for (int64_t c = first; c < width; c += step)
#pragma unroll
    for (int k = 0; k < kVec; ++k) block_partial[c + k] = dweight_acc[c + k];
}

// ---- rows in registers ----------------------------------------------------------------------------------------

constexpr int kChunk = 8;  // BF16 elements in 16 bytes
using Chunk = Pack<bf16, kChunk>;

__device__ __forceinline__ Chunk load_chunk(const bf16* p) { return *reinterpret_cast<const Chunk*>(p); }

// The forward of rows [first, first + kRows) per block iteration; thread t holds chunk t of each.
template <int kRows>
__global__ void rms_norm_forward_rows_kernel(const bf16* x, const bf16* __restrict__ weight, bf16* y, int64_t rows,
                                             int64_t width, float eps, RowStrides strides, float weight_offset) {
  gpu::wait_for_previous_kernel();
  const int64_t c = int64_t(threadIdx.x) * kChunk;
  const bool has_chunk = c < width;  // the block is rounded up to whole warps
  float w[kChunk] = {};
  if (has_chunk) load_weight<kChunk>(weight + c, weight_offset, w);
  for (int64_t first = int64_t(blockIdx.x) * kRows; first < rows; first += int64_t(gridDim.x) * kRows) {
    Chunk xv[kRows];
    float square_sum[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      square_sum[r] = 0.0f;
      if (!has_chunk || first + r >= rows) continue;
      xv[r] = load_chunk(x + (first + r) * strides.x + c);
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const float v = to_float(xv[r].v[k]);
        square_sum[r] += v * v;
      }
    }
    block_sum(square_sum);  // the loop's bounds are the block's, so every thread gets here
    if (!has_chunk) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (first + r >= rows) continue;
      const float rstd = 1.0f / sqrtf(square_sum[r] / float(width) + eps);
      float v[kChunk];
#pragma unroll
      for (int k = 0; k < kChunk; ++k) v[k] = w[k] * (to_float(xv[r].v[k]) * rstd);
      store<kChunk>(y + (first + r) * strides.out + c, v);
    }
  }
}

// The backward of the rows blockIdx.x + i·gridDim.x (the one-row kernel's rows of this block, in the same order),
// kRows of them per block iteration; the dweight partial of the thread's chunk stays in registers.
template <int kRows>
__global__ void rms_norm_backward_rows_kernel(const bf16* dy, const bf16* __restrict__ x,
                                              const bf16* __restrict__ weight, const bf16* residual, bf16* dx,
                                              float* __restrict__ partial, int64_t rows, int64_t width, float eps,
                                              RowStrides strides, float weight_offset) {
  gpu::wait_for_previous_kernel();
  const int64_t c = int64_t(threadIdx.x) * kChunk;
  const bool has_chunk = c < width;
  float wv[kChunk] = {}, dweight_acc[kChunk] = {};
  if (has_chunk) load_weight<kChunk>(weight + c, weight_offset, wv);
  const int64_t stride = gridDim.x;
  for (int64_t first = blockIdx.x; first < rows; first += stride * kRows) {
    Chunk xv[kRows], gv[kRows], rv[kRows];
    float sums[2 * kRows];  // per row: Σ x², Σ w·dy·x
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first + r * stride;
      sums[2 * r] = sums[2 * r + 1] = 0.0f;
      if (!has_chunk || row >= rows) continue;
      xv[r] = load_chunk(x + row * strides.x + c);
      gv[r] = load_chunk(dy + row * width + c);
      if (residual != nullptr) rv[r] = load_chunk(residual + row * strides.out + c);  // early: more bytes in flight
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const float xf = to_float(xv[r].v[k]), gf = to_float(gv[r].v[k]);
        sums[2 * r] += xf * xf;
        sums[2 * r + 1] += wv[k] * gf * xf;
      }
    }
    block_sum(sums);
    if (!has_chunk) continue;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first + r * stride;
      if (row >= rows) continue;
      const float rstd = 1.0f / sqrtf(sums[2 * r] / float(width) + eps);
      const float correction = rstd * rstd * rstd * sums[2 * r + 1] / float(width);
      float out[kChunk];
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        const float xf = to_float(xv[r].v[k]), gf = to_float(gv[r].v[k]);
        const float rf = residual != nullptr ? to_float(rv[r].v[k]) : 0.0f;
        out[k] = rf + (rstd * wv[k] * gf - xf * correction);
        dweight_acc[k] += gf * xf * rstd;
      }
      store<kChunk>(dx + row * strides.out + c, out);
    }
  }
  if (has_chunk) store<kChunk>(partial + int64_t(blockIdx.x) * width + c, dweight_acc);
}

bool vectorizable(int64_t width, std::initializer_list<const void*> pointers, RowStrides strides) {
  if (width % 8 != 0 || strides.x % 8 != 0 || strides.out % 8 != 0) return false;
  for (const void* p : pointers)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

int64_t backward_blocks(int64_t rows) { return std::min(rows, kBackwardBlocks); }

// Rows of at most this many chunks (2048 elements) fit the rows-in-registers kernels: one chunk per thread of a
// block of at most 256 threads, so the block (and its block_sum order) is the one-row kernels' block. (At 4096
// elements the block has 512 threads, and the 4-row backward's 162 registers a thread are more than an SM has:
// cudaErrorLaunchOutOfResources on the H200.)
constexpr int64_t kMaxRegisterChunks = 256;
// Rows a block holds at once, by width, as measured (H200, session 10, RowKernelsGpu.DISABLED_TimesMoonlightShapes,
// 8192 rows): at 2048 the one-row kernels are the faster (forward 23.6 us against 24.8 / 25.7 / 31.3 / 34.5 for 1, 2,
// 4, 8 rows; backward 47.3 against 58.8 / 59.2 / 82.2, with a residual 54.1 against 62.8 / 62.4 / 86.6), at 512
// (MLA's kv_a_layernorm) the rows-in-registers ones (forward 2 rows 6.1 us against 7.9; backward 4 rows 16.8 against
// 21.5, with a residual 17.3 against 23.5). Registers at width 2048 (sm_90a): forward 39/48/72/118, backward
// 72/94/162/255 for 1/2/4/8 rows.
int forward_rows_in_registers(int64_t width) { return width <= 512 ? 2 : 0; }
int backward_rows_in_registers(int64_t width) { return width <= 512 ? 4 : 0; }

bool fits_registers(int64_t width, std::initializer_list<const void*> pointers, RowStrides strides) {
  return vectorizable(width, pointers, strides) && width / kChunk <= kMaxRegisterChunks;
}

template <int kRows>
cudaError_t forward_rows(const bf16* x, const bf16* weight, bf16* y, int64_t rows, int64_t width, float eps,
                         RowStrides strides, float weight_offset, cudaStream_t stream) {
  const unsigned blocks = unsigned(std::min((rows + kRows - 1) / kRows, kMaxForwardBlocks));
  gpu::launch_dependent(rms_norm_forward_rows_kernel<kRows>, blocks, row_block_threads(width, kChunk), 0, stream, x,
                        weight, y, rows, width, eps, strides, weight_offset);
  return cudaGetLastError();
}

template <int kRows>
cudaError_t backward_rows(const bf16* dy, const bf16* x, const bf16* weight, const bf16* residual, bf16* dx,
                          float* partial, int64_t rows, int64_t width, float eps, RowStrides strides,
                          float weight_offset, cudaStream_t stream) {
  gpu::launch_dependent(rms_norm_backward_rows_kernel<kRows>, unsigned(backward_blocks(rows)),
                        row_block_threads(width, kChunk), 0, stream, dy, x, weight, residual, dx, partial, rows, width,
                        eps, strides, weight_offset);
  return cudaGetLastError();
}

template <int kVec>
cudaError_t backward(const bf16* dy, const bf16* x, const bf16* weight, const bf16* residual, bf16* dx, float* partial,
                     int64_t rows, int64_t width, float eps, RowStrides strides, float weight_offset,
                     cudaStream_t stream) {
  const int threads = row_block_threads(width, kVec);
  const size_t shared = size_t(width) * sizeof(float);
  if (shared > 32 * 1024) {  // opt in past the default 48 KiB (block_sum adds a small static buffer)
    const cudaError_t status = gpu::allow_dynamic_shared_memory(rms_norm_backward_kernel<kVec>);
    if (status != cudaSuccess) return status;
  }
  gpu::launch_dependent(rms_norm_backward_kernel<kVec>, unsigned(backward_blocks(rows)), threads, shared, stream, dy, x,
                        weight, residual, dx, partial, rows, width, eps, strides, weight_offset);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rms_norm_forward_with(int rows_in_registers, const void* x, const void* weight, void* y,
                                         int64_t rows, int64_t width, float eps, cudaStream_t stream,
                                         RowStrides strides, float weight_offset) {
  if (rows == 0 || width == 0) return cudaSuccess;
  strides = packed_if_unset(strides, width);
  const auto* xp = static_cast<const bf16*>(x);
  const auto* wp = static_cast<const bf16*>(weight);
  auto* yp = static_cast<bf16*>(y);
  if (rows_in_registers != 0 && !fits_registers(width, {x, weight, y}, strides)) return cudaErrorInvalidValue;
  switch (rows_in_registers) {
    case 0: break;
    case 1:
      return forward_rows<1>(xp, wp, yp, rows, width, eps, strides, weight_offset, stream);
    case 2:
      return forward_rows<2>(xp, wp, yp, rows, width, eps, strides, weight_offset, stream);
    case 4:
      return forward_rows<4>(xp, wp, yp, rows, width, eps, strides, weight_offset, stream);
    case 8:
      return forward_rows<8>(xp, wp, yp, rows, width, eps, strides, weight_offset, stream);
    default: return cudaErrorInvalidValue;
  }
  const unsigned blocks = unsigned(std::min(rows, kMaxForwardBlocks));
  if (vectorizable(width, {x, weight, y}, strides))
    gpu::launch_dependent(rms_norm_forward_kernel<8>, blocks, row_block_threads(width, 8), 0, stream, xp, wp, yp, rows,
                          width, eps, strides, weight_offset);
  else
    gpu::launch_dependent(rms_norm_forward_kernel<1>, blocks, row_block_threads(width, 1), 0, stream, xp, wp, yp, rows,
                          width, eps, strides, weight_offset);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_forward(const void* x, const void* weight, void* y, int64_t rows, int64_t width, float eps,
                                    cudaStream_t stream, RowStrides strides, float weight_offset) {
  strides = packed_if_unset(strides, width);
  const int rows_in_registers =
      fits_registers(width, {x, weight, y}, strides) ? forward_rows_in_registers(width) : 0;
  return launch_rms_norm_forward_with(rows_in_registers, x, weight, y, rows, width, eps, stream, strides,
                                      weight_offset);
}

size_t rms_norm_backward_workspace_bytes(int64_t rows, int64_t width) {
  return size_t(backward_blocks(rows)) * size_t(width) * sizeof(float);
}

cudaError_t launch_rms_norm_backward_with(int rows_in_registers, const void* dy, const void* x, const void* weight,
                                          const void* residual, void* dx, void* dweight, bool dweight_is_bf16,
                                          int64_t rows, int64_t width, float eps, void* workspace, cudaStream_t stream,
                                          RowStrides strides, float weight_offset) {
  if (rows == 0 || width == 0) return cudaSuccess;
  strides = packed_if_unset(strides, width);
  const auto* dyp = static_cast<const bf16*>(dy);
  const auto* xp = static_cast<const bf16*>(x);
  const auto* wp = static_cast<const bf16*>(weight);
  const auto* rp = static_cast<const bf16*>(residual);
  auto* dxp = static_cast<bf16*>(dx);
  auto* partial = static_cast<float*>(workspace);
  if (rows_in_registers != 0 && !fits_registers(width, {dy, x, weight, residual, dx, workspace}, strides))
    return cudaErrorInvalidValue;
  cudaError_t status = cudaSuccess;
  switch (rows_in_registers) {
    case 0:
      status = vectorizable(width, {dy, x, weight, residual, dx}, strides)
                   ? backward<8>(dyp, xp, wp, rp, dxp, partial, rows, width, eps, strides, weight_offset, stream)
                   : backward<1>(dyp, xp, wp, rp, dxp, partial, rows, width, eps, strides, weight_offset, stream);
      break;
    case 1:
      status = backward_rows<1>(dyp, xp, wp, rp, dxp, partial, rows, width, eps, strides, weight_offset, stream);
      break;
    case 2:
      status = backward_rows<2>(dyp, xp, wp, rp, dxp, partial, rows, width, eps, strides, weight_offset, stream);
      break;
    case 4:
      status = backward_rows<4>(dyp, xp, wp, rp, dxp, partial, rows, width, eps, strides, weight_offset, stream);
      break;
    // No 8: its 255 registers a thread left a 256-thread block out of resources (cudaErrorLaunchOutOfResources, H200).
    default: return cudaErrorInvalidValue;
  }
  if (status != cudaSuccess || dweight == nullptr) return status;  // no dweight: a frozen norm
  return launch_add_column_sums(partial, backward_blocks(rows), width, width, dweight, dweight_is_bf16, stream);
}

cudaError_t launch_rms_norm_backward(const void* dy, const void* x, const void* weight, const void* residual, void* dx,
                                     void* dweight, bool dweight_is_bf16, int64_t rows, int64_t width, float eps,
                                     void* workspace, cudaStream_t stream, RowStrides strides, float weight_offset) {
  strides = packed_if_unset(strides, width);
  // The workspace is aligned for the partials' 16-byte stores whenever the width is (gpu::allocate aligns it).
  const int rows_in_registers = fits_registers(width, {dy, x, weight, residual, dx, workspace}, strides)
                                    ? backward_rows_in_registers(width)
                                    : 0;
  return launch_rms_norm_backward_with(rows_in_registers, dy, x, weight, residual, dx, dweight, dweight_is_bf16, rows,
                                       width, eps, workspace, stream, strides, weight_offset);
}

}  // namespace moetune::ops::cuda
