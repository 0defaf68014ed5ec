// Launchers of Mamba2's causal depthwise conv1d + SiLU (forward and backward): raw pointers in, a CUDA status out.
// Free of the engine's host headers so that .cu files compile without fmt; ops/cuda/mamba2_conv.cpp wraps them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "moetune/ops/cuda/mamba2_scan_kernels.h"

namespace moetune::ops::cuda {

// The longest conv kernel (conv_kernel) the backward's weight-gradient registers hold.
inline constexpr int64_t kMamba2MaxConvKernel = 8;

struct Mamba2ConvDims {
  int64_t rows = 0, channels = 0, kernel = 0;
};

struct Mamba2ConvPointers {
  StridedBf16 xbc;                       // [N, C]
  const void* weight = nullptr;          // BF16 [C, K]
  const void* bias = nullptr;            // BF16 [C], or null
  const uint8_t* starts = nullptr;       // [N], 1 where a document begins (the window restarts)
  const uint8_t* valid = nullptr;        // [N], 0 for padding (output 0 there), or null: every row valid
};

// out[n, c] = silu(bias[c] + Σ_k weight[c, k] · xbc[n − (K−1) + k, c]) over rows of n's document; 0 at padding.
cudaError_t launch_mamba2_conv_forward(const Mamba2ConvDims& dims, const Mamba2ConvPointers& in, StridedBf16 out,
                                       cudaStream_t stream);

size_t mamba2_conv_backward_workspace_bytes(const Mamba2ConvDims& dims);

// dxbc = d(conv)/d(xbc) given dout (read as 0 at padding rows); dweight and dbias (null: frozen) += their
// gradients, summed in fp32 in a fixed order.
cudaError_t launch_mamba2_conv_backward(const Mamba2ConvDims& dims, const Mamba2ConvPointers& in, StridedBf16 dout,
                                        StridedBf16 dxbc, void* dweight, void* dbias, bool grads_bf16,
                                        void* workspace, cudaStream_t stream);

// out[n, :] = valid[n] ? in[n, :] : 0 for rows × width BF16 elements; out may be in itself.
cudaError_t launch_mask_rows(StridedBf16 in, StridedBf16 out, int64_t rows, int64_t width, const uint8_t* valid,
                             cudaStream_t stream);

}  // namespace moetune::ops::cuda
