// The experts' grouped GEMMs on the GPU (CUTLASS SM90 grouped kernels), over rows already in expert-major
// order: group e owns rows [offsets[e], offsets[e+1]) (offsets: device I32 [E+1], offsets[0] = 0,
// non-decreasing, offsets[E] <= R; a group may be empty). The counts are read on the device only: nothing here
// synchronises the host. All matrices are bf16, row-major and contiguous; accumulation is fp32. K and N must
// be multiples of 8 (TMA moves 16-byte rows).
#pragma once

#include <string>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/grouped_gemm_kernels.h"

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
void grouped_matmul_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& offsets, const Tensor& dw,
                                bool accumulate);

// The tiles (kernels) a kind can run, its default first (grouped_gemm_kernels.h), and one's name.
std::vector<GroupedGemmTile> grouped_gemm_tiles(GroupedGemmKind kind);
std::string describe(GroupedGemmTile tile);

// The kind grouped_matmul runs: RowsTimesWeightT when transpose_w, else RowsTimesWeight.
inline GroupedGemmKind grouped_matmul_kind(bool transpose_w) {
  return transpose_w ? GroupedGemmKind::RowsTimesWeightT : GroupedGemmKind::RowsTimesWeight;
}

// grouped_matmul and grouped_matmul_weight_grad on a given tile (the tests of each kernel, timing tests).
void grouped_matmul_on(GroupedGemmTile tile, const Tensor& x, const Tensor& weights, bool transpose_w,
                       const Tensor& offsets, const Tensor& out, float alpha = 1.0f, bool accumulate = false);
void grouped_matmul_weight_grad_on(GroupedGemmTile tile, const Tensor& dy, const Tensor& x, const Tensor& offsets,
                                   const Tensor& dw, bool accumulate);

// On (the default): the first call of a problem (kind, N, K, rows, groups) that overwrites its output times every
// tile of its kind on the call's own operands (the host waits, once per problem and process; a few ms) and keeps
// the fastest where it beats the default by 2%; a problem first met accumulating keeps the default. The tiles of
// a kind give bit-identical results, so the choice changes only the speed. Off: the default for problems not
// yet met. Why timing rather than a rule on the shape: at Moonlight's and Qwen3's shapes each of the forward's
// three tiles was the fastest somewhere, by 2-9%, and the isolated timings and the step's disagreed on which
// (docs/benchmarks.md, session 12).
void set_grouped_gemm_tuning(bool on);

}  // namespace moetune::ops::cuda
