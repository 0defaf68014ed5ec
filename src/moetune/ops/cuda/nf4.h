// NF4 weights on the GPU (QLoRA's frozen base; the format and the CPU reference are ops/nf4.h): the packed codes
// and the double-quantized absmax values (about 0.52 bytes a weight), made on the GPU from the uploaded weights
// or uploaded from the CPU's, and a kernel that dequantizes them into a bf16 (or f32) buffer just before a GEMM
// reads it. Both directions give the CPU reference's bytes and values exactly.
#pragma once

#include "moetune/core/tensor.h"
#include "moetune/ops/nf4.h"

namespace moetune::ops::cuda {

struct Nf4DeviceTensor {
  Shape shape;
  Tensor packed;         // U8 [ceil(n/2)]
  Tensor absmax_codes;   // U8 [blocks of 64]
  Tensor absmax_scales;  // F32 [groups of 256 blocks]
  Tensor tables;         // F32 [256 + 16]: the signed dynamic map, then the NF4 code
  float offset = 0;
  size_t bytes() const;
};

Nf4DeviceTensor upload_nf4(const Nf4Tensor& q);
// ops::nf4_quantize on the GPU: x (bf16 or f32, on the GPU) coded on the device; only the blocks' absmax values
// (1/64 of the values) travel to the host, where their mean, the double quantization's offset, is summed in the
// CPU's order. The same bytes as the CPU's.
Nf4DeviceTensor nf4_quantize(const Tensor& x);
// out: BF16 or F32 on the GPU with q's element count.
void nf4_dequantize(const Nf4DeviceTensor& q, const Tensor& out);

}  // namespace moetune::ops::cuda
