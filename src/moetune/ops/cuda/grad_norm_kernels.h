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
  // Where its partial sums go: slots [first_slot, first_slot + grad_norm_slot_count(numel)) of the caller's
  // array, one per kGradNormSlotElements of the tensor, in order.
  int64_t first_slot;
  // Or null: a [numel / row_length, row_length] gradient that is +0 outside the rows whose flag is nonzero (the
  // lazily updated embedding's, ops/cuda/adamw_rows.h). Only those rows are read, and a slot without any is
  // written 0 unread; the slots have the same bits, as +0 adds nothing. At most one such tensor a launch.
  const int32_t* row_marked = nullptr;
  int64_t row_length = 0;
};

// Each slot holds Σ g² over one fixed span of one tensor, summed in a fixed order, so a slot's bits depend on
// that span alone: the same whichever launch computes it, together with whichever other tensors. That is what
// lets the engine compute the partials of each layer's gradients as the backward pass finishes them
// (train/cuda/overlapped_grad_norm.h) and still get grad_norm_squared's bits. 128 Ki elements (256 KB of bf16)
// a slot: ~19 K slots over Moonlight's 5 GB of gradients, few enough for one block to add up.
inline constexpr int64_t kGradNormSlotElements = int64_t(1) << 17;
inline int64_t grad_norm_slot_count(int64_t numel) {
  return numel <= 0 ? 0 : (numel + kGradNormSlotElements - 1) / kGradNormSlotElements;
}

// Σ g² of each slot of each tensor into slots[first_slot + k] (tensors with numel 0 write nothing). Any subset
// of the tensors, in any order and any number of launches, writes the same bits into the same slots.
cudaError_t launch_grad_norm_partials(const GradNormTensor* tensors, int64_t count, float* slots, cudaStream_t stream);

// Σ values[0, count) in fp32 in a fixed order on every GPU, into *total (0 for count 0); `scratch` holds
// kFloatSumScratch floats. Sums the slots of launch_grad_norm_partials (once all are written: the gradients'
// Σ g²) and the per-chunk partials of the gradient norm folded into AdamW.
inline constexpr int64_t kFloatSumScratch = 1024;
cudaError_t launch_float_sum(const float* values, int64_t count, float* scratch, float* total, cudaStream_t stream);

// *coefficient = min(1, max_norm / (sqrt(*norm_squared) + 1e-6)), torch's clip_grad_norm_ factor; a NaN norm
// gives a NaN coefficient, as in torch.
cudaError_t launch_clip_coefficient(const float* norm_squared, double max_norm, float* coefficient,
                                    cudaStream_t stream);

}  // namespace moetune::ops::cuda
