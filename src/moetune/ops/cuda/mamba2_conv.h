// Mamba2's causal depthwise conv1d + SiLU on the GPU (ops/mamba2.h semantics): BF16 in and out, fp32 inside,
// document restarts and padding rows given as U8 flags on the GPU (ops::cuda::upload_row_flags).
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/cuda/column_block.h"
#include "moetune/ops/cuda/mamba2_conv_kernels.h"
#include "moetune/ops/mamba2.h"

namespace moetune::ops::cuda {

// The conv's weight ([C, K] BF16, K within what the kernels take) and bias ([C] BF16, or undefined) checked, and
// the sizes they and xbc's rows give.
Mamba2ConvDims checked_conv_operands(std::string_view op, const ColumnBlock& xbc, const Tensor& weight,
                                     const Tensor& bias);

// A CPU flag per row (DocumentStarts, a validity mask) as a U8 tensor on the GPU; undefined when `flags` is empty.
Tensor upload_row_flags(const std::vector<uint8_t>& flags);

// out [N, C] = silu(conv(xbc)) with weight [C, K] and bias [C] (BF16, bias undefined when absent); rows whose
// `valid` flag is 0 get 0 (valid undefined: all rows valid). starts and valid: U8 [N] on the GPU.
void mamba2_conv_forward(const ColumnBlock& xbc, const Tensor& weight, const Tensor& bias, const Tensor& starts,
                         const Tensor& valid, const ColumnBlock& out);

// dxbc from dout (0 at padding rows); dweight [C, K] and dbias [C] (BF16 or F32, undefined: frozen) accumulate.
void mamba2_conv_backward(const ColumnBlock& dout, const ColumnBlock& xbc, const Tensor& weight, const Tensor& bias,
                          const Tensor& starts, const Tensor& valid, const ColumnBlock& dxbc, const Tensor& dweight,
                          const Tensor& dbias);

// out = in with the rows whose `valid` flag is 0 set to 0 (valid: U8 [N] on the GPU); out may be in itself.
void mask_padding_rows(const ColumnBlock& in, const Tensor& valid, const ColumnBlock& out);

}  // namespace moetune::ops::cuda
