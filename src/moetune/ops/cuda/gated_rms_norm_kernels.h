// Launchers of the gated RMSNorm over BF16 rows, the gate before the norm (Mamba2's Zamba2RMSNormGated,
// norm_before_gate false) or after it (Qwen3-Next's Qwen3NextRMSNormGated): raw pointers in, a CUDA status out. Free
// of the engine's host headers; ops/cuda/gated_rms_norm.cpp wraps them for Tensors.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "moetune/ops/cuda/mamba2_scan_kernels.h"

namespace moetune::ops::cuda {

struct GatedRmsNormDims {
  int64_t rows = 0, width = 0, group = 0;  // statistics per `group` consecutive columns
  float eps = 0;
  bool gate_after_norm = false;  // y = weight ⊙ rms_norm(x) ⊙ silu(z) instead of weight ⊙ rms_norm(x ⊙ silu(z))
  bool weight_per_group = false;  // weight [group], the same for every group (one per value head), else [width]
};

// y = weight ⊙ rms_norm_per_group(x ⊙ silu(z)), or weight ⊙ rms_norm_per_group(x) ⊙ silu(z); weight BF16.
cudaError_t launch_gated_rms_norm_forward(const GatedRmsNormDims& dims, StridedBf16 x, StridedBf16 z,
                                          const void* weight, StridedBf16 y, cudaStream_t stream);

size_t gated_rms_norm_backward_workspace_bytes(const GatedRmsNormDims& dims);

// dx and dz from dy; dweight (BF16 or F32, null: frozen) += Σ_rows dy ⊙ normed, in a fixed order.
cudaError_t launch_gated_rms_norm_backward(const GatedRmsNormDims& dims, StridedBf16 dy, StridedBf16 x,
                                           StridedBf16 z, const void* weight, StridedBf16 dx, StridedBf16 dz,
                                           void* dweight, bool dweight_bf16, void* workspace, cudaStream_t stream);

}  // namespace moetune::ops::cuda
