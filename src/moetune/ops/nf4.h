// NF4 as bitsandbytes defines it (QLoRA's 4-bit NormalFloat): blocks of 64 values, each scaled by its absmax and
// rounded to the nearest of 16 code values; with double quantization, the blocks' absmax values minus their
// mean are themselves quantized to 8 bits (bitsandbytes' signed dynamic map) in blocks of 256. The CPU reference,
// bit-exact with tests/reference/make_nf4_fixtures.py (which checks itself against bitsandbytes 0.50.2).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "moetune/core/tensor.h"
#include "moetune/ops/blockwise_quant.h"

namespace moetune::ops {

inline constexpr int64_t kNf4BlockSize = 64;
inline constexpr int64_t kNf4AbsmaxBlockSize = 256;

const std::array<float, 16>& nf4_code();

struct Nf4Tensor {
  Shape shape;
  std::vector<uint8_t> packed;        // two codes a byte, the first value in the high nibble; odd counts pad code 7 (0.0)
  std::vector<uint8_t> absmax_codes;  // per block of 64: 8-bit code of (absmax - offset) / its block's scale
  std::vector<float> absmax_scales;   // per 256 blocks
  float offset = 0;                   // the mean of the blocks' absmax values
  int64_t numel() const { return shape_numel(shape); }
  size_t bytes() const { return packed.size() + absmax_codes.size() + absmax_scales.size() * sizeof(float) + sizeof(float); }
};

// x: f32 (or bf16, read as its exact f32 values) on the CPU. Double-quantized, as bitsandbytes'
// quantize_4bit(..., compress_statistics=True, quant_type="nf4"). `threads` > 1 codes the blocks on that many
// threads (QLoRA quantizes a 30B base at load): the same bytes, since every block is coded on its own.
Nf4Tensor nf4_quantize(const Tensor& x, int threads = 1);
Tensor nf4_dequantize(const Nf4Tensor& q);
// Double quantization's offset: the mean of the blocks' absmax values, summed as numpy/torch sum float32 (pairwise),
// so that the GPU's quantizer (ops/cuda/nf4.h), which codes the blocks on the device, gets the same one.
float nf4_absmax_mean(const std::vector<float>& absmax);
// The blocks' absmax values as double quantization stores them.
std::vector<float> nf4_absmax(const Nf4Tensor& q);

// Without double quantization: the codes packed two a byte, and the absmax per block.
std::vector<uint8_t> nf4_pack(const std::vector<uint8_t>& codes);
Tensor nf4_dequantize(const std::vector<uint8_t>& packed, const std::vector<float>& absmax, const Shape& shape);

}  // namespace moetune::ops
