// The optimizer step on the GPU: fused multi-tensor AdamW with torch.optim.AdamW's semantics (decoupled weight
// decay, bias correction), for the three ways the engine can keep optimizer state. train::AdamW is the fp32
// reference it is tested against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

enum class OptimizerPrecision {
  Fp32Master,      // bf16 param for compute + f32 master copy; f32 moments; update in fp32, param = rne(master)
  Bf16Stochastic,  // bf16 param and bf16 moments; math in fp32; param and moments written with stochastic rounding
  PureBf16,        // bf16 param and moments; math in fp32, round to nearest even (what HF does in bf16)
};

// "fp32_master" (or "fp32") | "bf16_stochastic_rounding" | "pure_bf16"; anything else fails naming it.
OptimizerPrecision parse_optimizer_precision(const std::string& name);

// One parameter's state, all CUDA tensors of one shape. param and grad are BF16; exp_avg and exp_avg_sq are F32
// for Fp32Master and BF16 otherwise; master (F32) is defined for Fp32Master only. With 8-bit state exp_avg and
// exp_avg_sq are U8 codes (train/adamw.h's layout, whatever the precision) and the *_absmax tensors hold their
// blocks' absmax values (F32 [ops::adamw_state_blocks(numel)]); they are undefined otherwise.
struct AdamWSlot {
  Tensor param, grad, exp_avg, exp_avg_sq, master;
  Tensor exp_avg_absmax, exp_avg_sq_absmax;
};

struct AdamWHyper {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // 1-based, after increment
};

// Updates every slot in place with a few multi-tensor launches on gpu::stream(); the host does not wait.
// grad_scale: a CUDA F32 [1] tensor that multiplies every gradient first (the clip coefficient, so clipping
// needs no host round trip), or undefined for 1. seed keys the stochastic rounding: the random bits are a hash
// of (seed, step, slot position in `slots`, element index), so a run is reproducible. int8_state: the moments are
// 8-bit (optimizer.state: int8); the parameter (and master copy) is kept as `precision` says, the moments are
// rounded to their nearest codes in every precision. norm_squared (a CUDA F32 [1] tensor, or undefined): Σ g²
// of the unscaled gradients, in fp32, deterministic on every GPU (not the same bits as grad_norm_squared's sum):
// the gradient norm where nothing clips, without a second pass over the gradients. lazy (or null): the slot at
// lazy->position() is a table updated row by row (ops/cuda/adamw_rows.h: only the rows marked since the last
// step), with the same bits as the eager update, norm included; not with 8-bit state.
class AdamWLazyRows;
void adamw_step(const std::vector<AdamWSlot>& slots, const AdamWHyper& hyper, OptimizerPrecision precision,
                const Tensor& grad_scale, uint64_t seed, bool int8_state = false, const Tensor& norm_squared = {},
                AdamWLazyRows* lazy = nullptr);

}  // namespace moetune::ops::cuda
