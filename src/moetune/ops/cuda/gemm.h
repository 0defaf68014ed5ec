// Dense GEMMs on the GPU through cuBLASLt: bf16 operands, fp32 accumulation, bf16 or f32 output, all queued
// on gpu::stream(). Matrices are row-major; a tensor of more than two dimensions is read as a matrix whose
// rows are dim 0 and whose columns are all the other dimensions folded ([T, heads, head_dim] is [T, heads·head_dim]).
// The first call for a given problem (shapes, transposes, dtypes, pointer alignment) asks cuBLASLt's
// heuristic for an algorithm; later calls reuse it, so a training step makes no heuristic queries after the first.
// The library keeps one handle and a 32 MiB workspace for the life of the process.
#pragma once

#include <cstddef>

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// Row-major D = alpha · op(A) · op(B) + beta · D, fp32 accumulation.
// a: [M, K] ([K, M] when transpose_a); b: [K, N] ([N, K] when transpose_b); d: [M, N]. a, b: BF16; d: BF16 or F32.
// M or N = 0 does nothing; K = 0 leaves beta · D (beta must then be 0 or 1).
void matmul(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& d,
            float alpha = 1.0f, float beta = 0.0f);

// Row-major D = op(A) · op(B) + C with C another matrix of D's dtype and shape (not D itself): cuBLASLt reads C
// in the GEMM's epilogue, so a residual add costs no pass of its own. One rounding to D's type, where a GEMM and
// then an add would round twice.
void matmul_add(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c,
                const Tensor& d);

// nn.Linear on the GPU (semantics of ops/linear.h): y = x·Wᵀ (+ bias), written into y.
// x [T, in] BF16, weight [out, in] BF16, bias [out] BF16 or F32 or undefined, y [T, out] BF16 or F32.
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y);

// y = residual + x·Wᵀ (+ bias): a residual sublayer's output projection. Without a bias one GEMM (matmul_add);
// with one, linear_forward and then an add. residual and y: [T, out] BF16, distinct.
void linear_forward_residual(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                             const Tensor& y);
// dx = dy·W written into dx (skipped when dx is undefined; added to dx when accumulate_dx);
// dweight += dyᵀ·x (accumulates, like .grad), or dweight = dyᵀ·x when write_dweight (a step's first backward pass
// writing the gradient whole instead of adding to a zeroed one: model/cuda/step_context.h overwrite_gradients);
// dbias += Σ_rows dy when dbias is defined.
// dy [T, out] BF16, x [T, in] BF16, weight [out, in] BF16; dx [T, in] BF16 or F32; dweight [out, in] and
// dbias [out] BF16 or F32. Undefined dweight skips the weight gradient (a frozen weight).
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias = {}, bool accumulate_dx = false,
                     bool write_dweight = false);

// Bytes of GPU memory the GEMM library holds for the life of the process once used (its workspace).
size_t gemm_workspace_bytes();

}  // namespace moetune::ops::cuda
