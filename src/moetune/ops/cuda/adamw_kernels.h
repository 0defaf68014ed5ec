// Launchers of the fused multi-tensor AdamW kernels: raw pointers in, a CUDA status out. Kept free of the engine's
// host headers so that adamw.cu compiles without fmt; ops/cuda/adamw.cpp checks the Tensors and calls it.
#pragma once

#include "moetune/ops/blockwise_quant_math.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "moetune/ops/adamw_math.h"

namespace moetune::ops::cuda {

using ops::AdamWConstants;

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

// The step's constants (computed on the host as train::AdamW computes them) and the stochastic rounding's key.
struct AdamWScalars {
  AdamWConstants constants;
  uint64_t seed;  // stochastic rounding: the random bits hash (seed, step, tensor position, element index)
  int64_t step;
};

// The gradient norm folded into the step (where nothing clips, the norm is only reported, and the step reads every
// gradient anyway): each warp of a launch leaves the Σ g² of the unscaled gradients of its part of a chunk in
// `norm_partials`, which then holds this many floats per chunk of every tensor (adamw_norm_partial_count).
inline constexpr int kAdamWNormPartialsPerChunk = 8;
int64_t adamw_norm_partial_count(const int64_t* numels, int64_t count);

// How the kernel with bf16 or f32 moments runs: the blocks of 256 threads it asks each SM to hold (0: what its
// register use gives; 6 caps the registers at 40), whether bf16 rounding to nearest uses the conversion
// instruction, and whether parameters no gradient has reached skip the update term (ops/adamw_math.h; without
// the skip, software rounding). `stages` ≥ 2 picks the kernel whose loads go through shared memory by bulk copies,
// that many tiles of 2048 elements deep (at most kAdamWMaxStages; min_blocks_per_sm then 0 or 3), and
// `evict_first` has those copies tell L2 to evict what they read first. Process-wide, so that the timing tests
// (OptimizerAccessGpu.DISABLED_Times*) can compare them; every choice gives the same bits.
inline constexpr int kAdamWMaxStages = 8;
struct AdamWAccess {
  int min_blocks_per_sm = 0;
  bool hardware_rounding = true;
  bool skip_untouched = true;
  // 0: the register kernel, except for fp32 master weights (below). Measured over Moonlight's slots on the H200
  // (OptimizerAccessGpu.DISABLED_TimesMoonlightSlots, session 9, docs/benchmarks.md): in pure bf16 the staged kernel
  // gains nothing (9.06-9.22 ms at 2-6 stages against the register kernel's 9.17), with stochastic rounding it
  // loses (13.0-15.8 against 11.6); both give the same bits (the GPU tests above passed). In Moonlight's step
  // (kernel timeline, session 11) 2 stages took 8.53 ms against the register kernel's 8.03, though the slots
  // timing put it 1% ahead: the register kernel stays. Session 21 measured stores by bulk copies too (each tile's
  // results left in its stage, one thread copying them out; not kept): a stand-alone probe of the same traffic ran
  // at 4.08 TB/s on 6 stages of 2048 elements and 2 blocks an SM against 3.93 for this kernel's access, over
  // Moonlight's slots 3 stages gave 8.96 ms against 9.19, and Moonlight's and the reference job's steps lost 1.0%
  // and 2.0% with it (docs/benchmarks.md).
  int stages = 0;
  bool evict_first = false;
  // With fp32 master weights (28 B an element) and stages < 2: the staged kernel at this depth (0: the register
  // kernel), 18.0 ms over Moonlight's slots at 6 stages against the register kernel's 55.0 (3.9 against 1.3 TB/s).
  int f32_master_stages = 6;
};
void set_adamw_access(AdamWAccess access);
AdamWAccess adamw_access();

// Updates every tensor in place, in as few launches as the kernel-parameter table allows (a few hundred
// tensors per launch). `grad_scale` is a device float that multiplies every gradient first, or null for 1.
// Tensors with numel 0 are skipped; `count` may be 0. `norm_partials`: null, or where the norm's partial sums go
// (above). first_position: where tensors[0] stands in the step's whole list of tensors (the stochastic
// rounding's key), when the list is launched in parts (adamw_step with a lazily updated slot).
cudaError_t launch_adamw(AdamWStorage storage, const AdamWTensorPointers* tensors, int64_t count,
                         const AdamWScalars& scalars, const float* grad_scale, float* norm_partials,
                         cudaStream_t stream, int64_t first_position = 0);

// One tensor's state with 8-bit moments (optimizer.state: int8): `exp_avg` holds codes of the signed dynamic map,
// `exp_avg_sq` of the unsigned one, one per element, and each block of kAdamWStateBlock elements its absmax.
// `param`, `grad` and `master` are as above.
struct AdamWInt8TensorPointers {
  uint16_t* param;
  const uint16_t* grad;
  uint8_t* exp_avg;
  uint8_t* exp_avg_sq;
  float* exp_avg_absmax;
  float* exp_avg_sq_absmax;
  float* master;
  int64_t numel;
};

// The dynamic maps on the device: `maps` the signed then the unsigned map (2 × 256 floats, ops/blockwise_quant.h),
// `buckets` the CodeBuckets of the signed map's midpoints (positive then negative side) and of the unsigned map's
// (positive side): 3 × kCodeBuckets entries.
struct DynamicCodes {
  const float* maps;
  const CodeBucket* buckets;
};

// As launch_adamw, with 8-bit moments; `storage` says how the parameter is kept.
cudaError_t launch_adamw_int8(AdamWStorage storage, const AdamWInt8TensorPointers* tensors, int64_t count,
                              const AdamWScalars& scalars, const float* grad_scale, DynamicCodes codes,
                              float* norm_partials, cudaStream_t stream);

}  // namespace moetune::ops::cuda
