// LoRA's low-rank products on the GPU, the twins of ops/lora.h (same operands, same layouts: A [r, in] and
// B [cols, r] as PEFT stores them; for the experts A [E·r, in] and B packed [out, r·E]), bf16 with fp32
// accumulation. The dense form runs cuBLASLt GEMMs (ops/cuda/gemm.h); the grouped form runs the experts' CUTLASS
// grouped GEMMs (ops/cuda/grouped_gemm.h) over the expert-major rows with the rank as N (x Aᵀ, d(x) B) or K
// (u Bᵀ, du A), so r must be a multiple of 8 there. Nothing synchronises the host.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/lora_dropout.h"

namespace moetune::ops::cuda {

// x [T, in]; y [T, out] gets scale · (x Aᵀ) Bᵀ added into its columns [first_column, first_column + B.rows).
// Returns u = x Aᵀ [T, r] for the backward pass. y is bf16, or F32 when the adapter covers all of its columns.
Tensor lora_forward(const Tensor& x, const Tensor& a, const Tensor& b, double scale, const Tensor& y, int64_t first_column);
// Reads dy's columns of this adapter; accumulates dA [r, in] and dB [cols, r]; adds d(x) into dx [T, in].
void lora_backward(const Tensor& dy, int64_t first_column, const Tensor& x, const Tensor& u, const Tensor& a,
                   const Tensor& b, double scale, const Tensor& da, const Tensor& db, const Tensor& dx);

// rows [R, in] expert-major, offsets device I32 [E+1]; adds into y [R, out]; returns u [R, r].
Tensor lora_grouped_forward(const Tensor& rows, const Tensor& offsets, const Tensor& a, const Tensor& b, double scale,
                            const Tensor& y);
// Accumulates dA [E·r, in] and dB [out, r·E]; adds d(rows) into drows [R, in].
void lora_grouped_backward(const Tensor& dy, const Tensor& rows, const Tensor& u, const Tensor& offsets, const Tensor& a,
                           const Tensor& b, double scale, const Tensor& da, const Tensor& db, const Tensor& drows);

// LoRA dropout on bf16 GPU tensors, the twins of ops/lora.h's: a new tensor with the mask applied to x, and
// dst += the mask applied to src (same element count).
Tensor lora_dropout_apply(const Tensor& x, const LoraDropout& dropout);
void lora_dropout_add(const Tensor& src, const LoraDropout& dropout, const Tensor& dst);

// The element movers around them, exposed for their tests. dst[:, first:first+cols] += scale · src.
void add_scaled_columns(const Tensor& src, double scale, const Tensor& dst, int64_t first);
// PEFT's packed expert B [out, r·E] as the grouped GEMMs' [E, out, r].
Tensor expert_b_grouped(const Tensor& packed, int64_t experts);

}  // namespace moetune::ops::cuda
