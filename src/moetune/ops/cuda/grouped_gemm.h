// The experts' grouped GEMMs on the GPU (CUTLASS SM90 grouped kernels), over rows already in expert-major
// order: group e owns rows [offsets[e], offsets[e+1]) (offsets: device I32 [E+1], offsets[0] = 0,
// non-decreasing, offsets[E] <= R; a group may be empty). The counts are read on the device only: nothing here
// synchronises the host. All matrices are bf16, row-major and contiguous; accumulation is fp32. K and N must
// be multiples of 8 (TMA moves 16-byte rows).
#pragma once

#include "moetune/core/tensor.h"

namespace moetune::ops::cuda {

// M-grouped: out[rows_e] = x[rows_e] · op(W_e), op(W_e) = W_eᵀ when transpose_w.
//   transpose_w = true : weights [E, N, K] (forward: gate_up [E, 2I, H], down [E, H, I])
//   transpose_w = false: weights [E, K, N] (input gradient: dY [R, 2I] · gate_up_e [2I, H])
// x [R, K], out [R, N]. Rows past offsets[E] are not written. out = alpha · x·op(W), or out += alpha · x·op(W)
// when accumulating (in the GEMM's epilogue, in fp32: LoRA adds its scaled low-rank product so, with no
// intermediate [R, N] matrix).
void grouped_matmul(const Tensor& x, const Tensor& weights, bool transpose_w, const Tensor& offsets, const Tensor& out,
                    float alpha = 1.0f, bool accumulate = false);

// K-grouped weight gradient: dW_e = dy[rows_e]ᵀ · x[rows_e] for every e, dy [R, N], x [R, K], dw [E, N, K];
// accumulate: dW_e += ... instead of =. An empty group gives dW_e = 0 (or leaves it when accumulating).
// norm_partials (CUDA F32 [grouped_weight_grad_norm_slots(dw)], or undefined; not with accumulate): the
// epilogue also writes partial sums of dW's squares there (of its bf16 values, as stored), so that their sum is
// Σ dW² without reading dW back: the clipping norm's share of the experts (model/cuda/expert_norm_partials.h).
// Each partial has one writer and a fixed order: the same bits for the same dW on every run.
void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& offsets, const Tensor& dw,
                                bool accumulate, const Tensor& norm_partials = Tensor());
// The floats grouped_matmul_weight_grad's norm partials take for dw [E, N, K].
int64_t grouped_weight_grad_norm_slots(const Tensor& dw);

}  // namespace moetune::ops::cuda
