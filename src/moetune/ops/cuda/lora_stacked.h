// Several LoRA adapters that read one input (q, k and v of the fused qkv projection, each with its own A and B
// as PEFT's q_proj/k_proj/v_proj) run as one low-rank product: their A's stacked [n·r, in] and their B's laid
// block-diagonally into [width, n·r] (adapter j's B in the rows of its own output columns and in its own r
// columns, zeros elsewhere). Then x is read once and y written once, by two GEMMs, where adapter by adapter it was
// six GEMMs, three [T, cols] temporaries and three passes adding them into y (and in the backward pass three
// column copies of dy and three accumulations into dx). The block-diagonal product costs n times the FLOPs of the
// B products, which at rank 16 are a few hundredths of the projection's own.
#pragma once

#include <vector>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// One adapter's place in the stack: its A [r, in], B [cols, r], and its first output column.
struct StackedPiece {
  Tensor a, b;
  int64_t first_column = 0;
};

// The stack of the pieces' A's [n·r, in] and their block-diagonal B [width, n·r], from their current values.
Tensor stack_a(const std::vector<StackedPiece>& pieces);
Tensor block_diagonal_b(const std::vector<StackedPiece>& pieces, int64_t width);

// y [T, width] += scale · (x A_stackᵀ) B_diagᵀ; returns u = x A_stackᵀ [T, n·r].
Tensor lora_stacked_forward(const Tensor& x, const Tensor& a_stack, const Tensor& b_diagonal, double scale, const Tensor& y);
// dx += du A_stack with du = scale · dy B_diag; adds each piece's rows of duᵀ x into its a_grads[j] and its
// block of scale · dyᵀ u into its b_grads[j] (bf16; undefined gradients, frozen adapters, are skipped).
void lora_stacked_backward(const Tensor& dy, const Tensor& x, const Tensor& u, const std::vector<StackedPiece>& pieces,
                           const Tensor& a_stack, const Tensor& b_diagonal, double scale,
                           const std::vector<Tensor>& a_grads, const std::vector<Tensor>& b_grads, const Tensor& dx);

}  // namespace moetune::ops::cuda
