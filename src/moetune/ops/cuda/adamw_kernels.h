// Launcher of the fused multi-tensor AdamW kernel: raw pointers in, a CUDA status out. Kept free of the engine's
// host headers so that adamw.cu compiles without fmt; ops/cuda/adamw.cpp checks the Tensors and calls it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace moetune::ops::cuda {

// How the optimizer state is stored and how results are rounded back into it.
enum class AdamWStorage {
  F32Master,               // param bf16 (written only), master/exp_avg/exp_avg_sq f32
  Bf16StochasticRounding,  // param/exp_avg/exp_avg_sq bf16, each written with stochastic rounding
  Bf16NearestRounding,     // param/exp_avg/exp_avg_sq bf16, each written rounded to nearest even
};

// One tensor's state. bf16 pointers are uint16_t bits. `master` is null unless the storage is F32Master;
// `exp_avg`/`exp_avg_sq` point to floats for F32Master and to bf16 bits otherwise.
struct AdamWTensorPointers {
  uint16_t* param;
  const uint16_t* grad;
  void* exp_avg;
  void* exp_avg_sq;
  float* master;
  int64_t numel;
};

// The step's constants, each computed on the host exactly as train::AdamW computes them (double, then float),
// so that the per-element arithmetic is the CPU reference's, operation for operation.
struct AdamWScalars {
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;
  float step_size;         // lr / (1 - beta1^step)
  float decay;             // 1 - lr * weight_decay
  float sqrt_correction2;  // sqrt(1 - beta2^step)
  float eps;
  uint64_t seed;  // stochastic rounding: the random bits hash (seed, step, tensor position, element index)
  int64_t step;
};

// Updates every tensor in place, in as few launches as the kernel-parameter table allows (a few hundred
// tensors per launch). `grad_scale` is a device float that multiplies every gradient first, or null for 1.
// Tensors with numel 0 are skipped; `count` may be 0.
cudaError_t launch_adamw(AdamWStorage storage, const AdamWTensorPointers* tensors, int64_t count,
                         const AdamWScalars& scalars, const float* grad_scale, cudaStream_t stream);

}  // namespace moetune::ops::cuda
