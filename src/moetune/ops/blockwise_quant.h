// bitsandbytes' blockwise 8-bit quantization, the CPU reference: blocks of values, each scaled by its absmax and
// rounded to the nearest entry of a sorted code (its dynamic maps, NF4). NF4 weights (ops/nf4.h) and 8-bit AdamW
// state (train/adamw.h) use it; the CUDA kernels share the per-value rule of ops/blockwise_quant_math.h.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "moetune/ops/blockwise_quant_math.h"

namespace moetune::ops {

// bitsandbytes' create_dynamic_map(signed=True) and create_dynamic_map(signed=False) (256 float32 values each,
// sorted): a sign bit (signed map), then as many leading zero bits as decades below 1 (down to 1e-6 / 1e-7), an
// indicator bit, and the remaining bits a linear fraction. Most codes sit near 0 where Adam's moments live.
const std::array<float, 256>& dynamic_map_signed();
const std::array<float, 256>& dynamic_map_unsigned();

// The float32 midpoints between neighbouring entries of a sorted code, as bitsandbytes computes them.
std::vector<float> code_midpoints(const float* code, int64_t code_size);

// Codes one block of `size` values with the rule of quantize_blocks below; returns the block's absmax.
// `full`: the block has the full block length (the last block of a tensor may be shorter). `nonzero`: positive
// values never get code 0 (nearest_nonzero_code in ops/blockwise_quant_math.h; the unsigned map only).
float quantize_block(const float* values, int64_t size, bool full, const std::vector<float>& midpoints, uint8_t* codes,
                     bool nonzero = false);

// Codes of blocks of `block` values: per block its absmax (at least 1e-38 to divide by), each value times its
// float32 reciprocal (the partial last block divides), clamped to [-1, 1], to the nearest entry of the sorted
// `code` (ties to the lower: the count of float32 midpoints it exceeds).
struct BlockCodes {
  std::vector<uint8_t> codes;  // one per value
  std::vector<float> absmax;   // one per block
};
BlockCodes quantize_blocks(const float* values, int64_t count, int64_t block, const float* code, int64_t code_size);

// The buckets bucketed_nearest_code (ops/blockwise_quant_math.h) reads for a code's sorted midpoints: for each
// bucket of each sign, the codes of its smallest and largest magnitude, as nearest_code gives them.
struct CodeBuckets {
  std::vector<CodeBucket> positive, negative;  // kCodeBuckets each
  static CodeBuckets build(const std::vector<float>& midpoints);
};

// The values back: code[codes[i]] * absmax[i / block].
void dequantize_blocks(const uint8_t* codes, const float* absmax, int64_t count, int64_t block, const float* code, float* out);

}  // namespace moetune::ops
