// Launchers of the global gradient-norm kernels: raw pointers in, a CUDA status out. Kept free of the engine's
// host headers so that grad_norm.cu compiles without fmt; ops/cuda/grad_norm.cpp checks the Tensors and calls
// them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

struct GradNormTensor {
  const uint16_t* data;  // bf16 bits
  int64_t numel;
  // Or null: a [numel / row_length, row_length] gradient that is +0 outside the rows whose flag is nonzero (the
  // lazily updated embedding's, ops/cuda/adamw_rows.h). Only those rows are read; the sum has the same bits, as
  // +0 adds nothing. At most one such tensor a launch.
  const int32_t* row_marked = nullptr;
  int64_t row_length = 0;
};

// How many floats of workspace launch_grad_norm_squared needs for these tensors (one per block it launches).
int64_t grad_norm_partial_count(const GradNormTensor* tensors, int64_t count);

// Σ g² over every element of every tensor, in fp32, into *norm_squared. Deterministic: each block writes the
// sum of its (fixed) chunks into `partials`, then one block adds the partials in a fixed order. `count` may be 0
// (the result is then 0); tensors with numel 0 are skipped.
cudaError_t launch_grad_norm_squared(const GradNormTensor* tensors, int64_t count, float* partials,
                                     float* norm_squared, cudaStream_t stream);

// Σ values[0, count) in fp32 in a fixed order on every GPU, into *total (0 for count 0); `scratch` holds
// kFloatSumScratch floats. Sums the per-chunk partials of the gradient norm folded into AdamW.
inline constexpr int64_t kFloatSumScratch = 1024;
cudaError_t launch_float_sum(const float* values, int64_t count, float* scratch, float* total, cudaStream_t stream);

// *coefficient = min(1, max_norm / (sqrt(*norm_squared) + 1e-6)), torch's clip_grad_norm_ factor; a NaN norm
// gives a NaN coefficient, as in torch.
cudaError_t launch_clip_coefficient(const float* norm_squared, double max_norm, float* coefficient,
                                    cudaStream_t stream);

}  // namespace moetune::ops::cuda
