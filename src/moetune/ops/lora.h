// Low-rank (LoRA) products added onto a projection's output: y[:, cols] += scale · (x Aᵀ) Bᵀ, with A [r, in] and
// B [cols, r] as PEFT's lora_A / lora_B store them. The grouped form does the same for each expert's contiguous
// rows of an expert-major buffer, with every expert's A and B packed as PEFT's ParamWrapper keeps them for a fused
// [E, out, in] parameter: A [E·r, in] (expert e's rows e·r .. e·r+r-1) and B [out, r·E] (expert e's column k at
// k·E + e).
#pragma once

#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/lora_dropout.h"

namespace moetune::ops {

// x [T, in]; adds into columns [first_column, first_column + B.rows) of y [T, out]. Returns u = x Aᵀ [T, r], what
// the backward pass needs besides x.
Tensor lora_forward(const Tensor& x, const Tensor& a, const Tensor& b, double scale, const Tensor& y, int64_t first_column);

// Given dy [T, out] (only the columns this adapter wrote are read): accumulates dA, dB (each undefined when frozen)
// and adds d(x) into dx [T, in].
void lora_backward(const Tensor& dy, int64_t first_column, const Tensor& x, const Tensor& u, const Tensor& a,
                   const Tensor& b, double scale, const Tensor& da, const Tensor& db, const Tensor& dx);

// rows [R, in] expert-major, offsets [E+1]; adds into y [R, out]; returns u [R, r].
Tensor lora_grouped_forward(const Tensor& rows, const std::vector<int64_t>& offsets, const Tensor& a, const Tensor& b,
                            double scale, const Tensor& y);
void lora_grouped_backward(const Tensor& dy, const Tensor& rows, const Tensor& u, const std::vector<int64_t>& offsets,
                           const Tensor& a, const Tensor& b, double scale, const Tensor& da, const Tensor& db,
                           const Tensor& drows);

// LoRA dropout's mask (ops/lora_dropout.h) on f32 x [T, in], element i of the flat x at index i: a new tensor.
Tensor lora_dropout_apply(const Tensor& x, const LoraDropout& dropout);
// dst += the mask applied to src (both f32, same shape): the dropout's backward added into d(x).
void lora_dropout_add(const Tensor& src, const LoraDropout& dropout, const Tensor& dst);

// One expert's B [out, r] gathered from the packed [out, r·E] (and scattered back into a packed gradient).
Tensor expert_lora_b(const Tensor& packed, int64_t expert, int64_t experts);
void add_expert_lora_b(const Tensor& packed, const Tensor& one, int64_t expert, int64_t experts);

}  // namespace moetune::ops
